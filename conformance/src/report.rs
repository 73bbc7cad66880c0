//! What a suite run tells people and CI: one stderr line per case as it
//! finishes, a summary, `--report-json` and `--junit`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;

use crate::suite::errors::Violation;
use crate::suite::expectations::Verdict;

/// One case in a report.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub id: String,
    pub verdict: Verdict,
    pub duration_ms: u64,
    /// Why it failed (or, for an expected failure, how).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The skip reason, or the expectations entry's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Error envelopes the target used in this case.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envelopes: BTreeMap<String, u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Totals.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub cases: usize,
    pub passed: usize,
    pub failed: usize,
    pub expected_failures: usize,
    pub stale: usize,
    pub skipped: usize,
    pub unexpected: usize,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite_version: String,
    pub target: String,
    pub prefix: String,
    pub mode: String,
    pub wall_ms: u64,
    pub summary: Summary,
    /// Error envelopes the target used, over the run.
    pub envelopes: BTreeMap<String, u32>,
    /// Closed-world findings of the error table (empty when it holds).
    pub closed_world: Vec<Violation>,
    pub cases: Vec<CaseReport>,
    /// Normalized live schemas, function suffix → `{request_schema, response_schema}`.
    pub schemas: BTreeMap<String, Value>,
}

impl Report {
    pub fn summarize(cases: &[CaseReport]) -> Summary {
        let mut s = Summary {
            cases: cases.len(),
            ..Summary::default()
        };
        for c in cases {
            match c.verdict {
                Verdict::Pass => s.passed += 1,
                Verdict::Fail => s.failed += 1,
                Verdict::ExpectedFail => s.expected_failures += 1,
                Verdict::Stale => s.stale += 1,
                Verdict::Skip => s.skipped += 1,
            }
            if c.verdict.unexpected() {
                s.unexpected += 1;
            }
        }
        s
    }

    /// Cases that fail the run.
    pub fn unexpected(&self) -> Vec<&CaseReport> {
        self.cases
            .iter()
            .filter(|c| c.verdict.unexpected())
            .collect()
    }

    /// Whether the run passes.
    pub fn ok(&self) -> bool {
        self.summary.unexpected == 0
    }

    /// The closing lines printed on stderr.
    pub fn summary_text(&self) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let unexpected = self.unexpected();
        if !unexpected.is_empty() {
            let _ = writeln!(out, "\nunexpected results:");
            for c in &unexpected {
                let _ = writeln!(
                    out,
                    "  {} {}: {}",
                    c.verdict.label(),
                    c.id,
                    c.message.as_deref().unwrap_or("")
                );
            }
        }
        let envelopes = if self.envelopes.is_empty() {
            "none observed".to_string()
        } else {
            self.envelopes
                .iter()
                .map(|(k, v)| format!("{k} ×{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "\n{} on {} ({} mode): {} cases — {} passed, {} failed, {} expected failures, {} stale, {} skipped",
            self.target, self.prefix, self.mode, s.cases, s.passed, s.failed, s.expected_failures, s.stale, s.skipped
        );
        let _ = writeln!(out, "error envelopes used by the target: {envelopes}");
        let _ = writeln!(
            out,
            "{} unexpected result{}; wall time {:.1} s",
            s.unexpected,
            if s.unexpected == 1 { "" } else { "s" },
            self.wall_ms as f64 / 1000.0
        );
        out
    }

    /// Writes `--report-json`.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        write_file(path, &text)
    }

    /// The JUnit XML document.
    pub fn junit(&self) -> String {
        let s = &self.summary;
        let mut x = String::new();
        let _ = writeln!(x, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            x,
            r#"<testsuites name="code-runner-conformance" tests="{}" failures="{}" skipped="{}" time="{:.3}">"#,
            s.cases,
            s.unexpected,
            s.skipped,
            self.wall_ms as f64 / 1000.0
        );
        let _ = writeln!(
            x,
            r#"  <testsuite name="{}" tests="{}" failures="{}" errors="0" skipped="{}" time="{:.3}">"#,
            xml(&format!("{} ({})", self.target, self.prefix)),
            s.cases,
            s.unexpected,
            s.skipped,
            self.wall_ms as f64 / 1000.0
        );
        let _ = writeln!(x, "    <properties>");
        let _ = writeln!(
            x,
            r#"      <property name="suite_version" value="{}"/>"#,
            xml(&self.suite_version)
        );
        let _ = writeln!(
            x,
            r#"      <property name="mode" value="{}"/>"#,
            xml(&self.mode)
        );
        for (k, v) in &self.envelopes {
            let _ = writeln!(
                x,
                r#"      <property name="envelope.{}" value="{v}"/>"#,
                xml(k)
            );
        }
        let _ = writeln!(x, "    </properties>");
        for c in &self.cases {
            let class = c.id.split('.').next().unwrap_or(&c.id);
            let _ = write!(
                x,
                r#"    <testcase classname="{}.{}" name="{}" time="{:.3}""#,
                xml(&self.target),
                xml(class),
                xml(&c.id),
                c.duration_ms as f64 / 1000.0
            );
            let body = match c.verdict {
                Verdict::Pass => String::new(),
                Verdict::Fail => format!(
                    "      <failure message=\"{}\" type=\"fail\">{}</failure>\n",
                    xml(&first_line(c.message.as_deref().unwrap_or("failed"))),
                    xml(c.message.as_deref().unwrap_or(""))
                ),
                Verdict::Stale => format!(
                    "      <failure message=\"{}\" type=\"stale-expectation\">{}</failure>\n",
                    xml(&first_line(c.message.as_deref().unwrap_or("stale"))),
                    xml(c.message.as_deref().unwrap_or(""))
                ),
                Verdict::Skip => format!(
                    "      <skipped message=\"{}\"/>\n",
                    xml(c.reason.as_deref().unwrap_or(""))
                ),
                Verdict::ExpectedFail => format!(
                    "      <system-out>expected failure ({}): {}</system-out>\n",
                    xml(c.reason.as_deref().unwrap_or("")),
                    xml(c.message.as_deref().unwrap_or(""))
                ),
            };
            if body.is_empty() {
                let _ = writeln!(x, "/>");
            } else {
                let _ = write!(x, ">\n{body}    </testcase>\n");
            }
        }
        let _ = writeln!(x, "  </testsuite>");
        let _ = writeln!(x, "</testsuites>");
        x
    }

    /// Writes `--junit`.
    pub fn write_junit(&self, path: &Path) -> std::io::Result<()> {
        write_file(path, &self.junit())
    }
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    l.chars().take(200).collect()
}

/// XML-escapes text (and drops characters XML 1.0 cannot carry).
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

/// The per-case progress lines on stderr.
pub struct Progress {
    total: usize,
    done: AtomicUsize,
    enabled: bool,
    out: Mutex<()>,
}

impl Progress {
    pub fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            total,
            done: AtomicUsize::new(0),
            enabled,
            out: Mutex::new(()),
        }
    }

    /// Prints `[  n/total] VERDICT id (1.23s)` and, for problems, the reason.
    pub fn case_done(&self, c: &CaseReport) {
        let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.enabled {
            return;
        }
        let width = self.total.to_string().len();
        let mut line = format!(
            "[{n:>width$}/{}] {:<5} {} ({:.2}s)",
            self.total,
            c.verdict.label(),
            c.id,
            c.duration_ms as f64 / 1000.0
        );
        match c.verdict {
            Verdict::Fail | Verdict::Stale => {
                if let Some(m) = &c.message {
                    let _ = write!(line, "\n      {}", m.chars().take(600).collect::<String>());
                }
            }
            Verdict::Skip | Verdict::ExpectedFail => {
                if let Some(r) = &c.reason {
                    let _ = write!(line, " — {r}");
                }
            }
            Verdict::Pass => {}
        }
        let _guard = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }
}
