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

use crate::suite::case::Level;
use crate::suite::errors::Violation;
use crate::suite::expectations::Verdict;

/// Which levels' failures fail a run (`run --level`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LevelGate {
    /// Only `contract` failures fail the run.
    Contract,
    /// `contract` and `recommended` failures fail the run.
    Recommended,
    /// Every failure fails the run (this repository's own CI).
    #[default]
    All,
}

impl LevelGate {
    /// Whether a problem at `level` fails the run. Results with no level
    /// (stale expectation entries) always count.
    pub fn counts(self, level: Option<Level>) -> bool {
        match (self, level) {
            (_, None) | (LevelGate::All, _) => true,
            (LevelGate::Recommended, Some(l)) => l != Level::Profile,
            (LevelGate::Contract, Some(l)) => l == Level::Contract,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LevelGate::Contract => "contract",
            LevelGate::Recommended => "recommended",
            LevelGate::All => "all",
        }
    }
}

/// One case in a report.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    pub id: String,
    /// The case's normative level; none for bookkeeping entries (a stale
    /// expectation), which count at every level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
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
    pub(crate) cases: usize,
    pub passed: usize,
    pub(crate) failed: usize,
    pub(crate) expected_failures: usize,
    pub(crate) stale: usize,
    pub skipped: usize,
    /// Problems that fail the run at its `--level`.
    pub unexpected: usize,
    /// Problems outside the run's `--level`: reported, not failing.
    #[serde(skip_serializing_if = "is_zero")]
    pub outside_level: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite_version: String,
    pub target: String,
    pub prefix: String,
    pub mode: String,
    /// The `--level` the run was judged at.
    pub level: LevelGate,
    pub wall_ms: u64,
    pub summary: Summary,
    /// The same totals per level (`none`: bookkeeping entries).
    pub by_level: BTreeMap<String, Summary>,
    /// Error envelopes the target used, over the run.
    pub envelopes: BTreeMap<String, u32>,
    /// Closed-world findings of the error table (empty when it holds).
    pub closed_world: Vec<Violation>,
    pub cases: Vec<CaseReport>,
    /// Normalized live schemas, function suffix → `{request_schema, response_schema}`.
    pub schemas: BTreeMap<String, Value>,
}

fn level_key(level: Option<Level>) -> String {
    level.map_or("none", Level::as_str).to_string()
}

impl Report {
    pub fn summarize(cases: &[CaseReport], gate: LevelGate) -> Summary {
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
                if gate.counts(c.level) {
                    s.unexpected += 1;
                } else {
                    s.outside_level += 1;
                }
            }
        }
        s
    }

    /// Totals per level, in level order.
    pub fn summarize_by_level(cases: &[CaseReport], gate: LevelGate) -> BTreeMap<String, Summary> {
        let mut groups: BTreeMap<String, Vec<CaseReport>> = BTreeMap::new();
        for c in cases {
            groups
                .entry(level_key(c.level))
                .or_default()
                .push(c.clone());
        }
        groups
            .into_iter()
            .map(|(k, v)| (k, Report::summarize(&v, gate)))
            .collect()
    }

    /// Cases that fail the run (at its `--level`).
    pub fn unexpected(&self) -> Vec<&CaseReport> {
        self.cases
            .iter()
            .filter(|c| c.verdict.unexpected() && self.level.counts(c.level))
            .collect()
    }

    /// One line per unexpected result, `VERDICT [level] id: message`, as the
    /// summary shows them (and as a test's failure message should).
    pub fn unexpected_lines(&self) -> Vec<String> {
        self.unexpected()
            .iter()
            .map(|c| {
                format!(
                    "{} [{}] {}: {}",
                    c.verdict.label(),
                    level_key(c.level),
                    c.id,
                    indent(c.message.as_deref().unwrap_or(""), "      ")
                )
            })
            .collect()
    }

    /// Problems reported but outside the run's `--level`.
    pub(crate) fn outside_level(&self) -> Vec<&CaseReport> {
        self.cases
            .iter()
            .filter(|c| c.verdict.unexpected() && !self.level.counts(c.level))
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
        let unexpected = self.unexpected_lines();
        if !unexpected.is_empty() {
            let _ = writeln!(out, "\nunexpected results:");
            for line in &unexpected {
                let _ = writeln!(out, "  {line}");
            }
        }
        let outside = self.outside_level();
        if !outside.is_empty() {
            let _ = writeln!(
                out,
                "\noutside --level {} (reported, not failing the run):",
                self.level.as_str()
            );
            for c in &outside {
                let _ = writeln!(
                    out,
                    "  {} [{}] {}: {}",
                    c.verdict.label(),
                    level_key(c.level),
                    c.id,
                    first_line(c.message.as_deref().unwrap_or(""))
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
        for (level, l) in &self.by_level {
            let _ = writeln!(
                out,
                "  {level:<12} {:>3} cases — {} passed, {} failed, {} expected failures, {} stale, {} skipped",
                l.cases, l.passed, l.failed, l.expected_failures, l.stale, l.skipped
            );
        }
        let _ = writeln!(out, "error envelopes used by the target: {envelopes}");
        let _ = writeln!(
            out,
            "{} unexpected result{} at --level {}{}; wall time {:.1} s",
            s.unexpected,
            if s.unexpected == 1 { "" } else { "s" },
            self.level.as_str(),
            if s.outside_level > 0 {
                format!(" ({} more outside it)", s.outside_level)
            } else {
                String::new()
            },
            self.wall_ms as f64 / 1000.0
        );
        out
    }

    /// Writes `--report-json`.
    pub(crate) fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        write_file(path, &text)
    }

    /// The JUnit XML document: one `<testsuite>` per level.
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
        for (level, l) in &self.by_level {
            let time: u64 = self
                .cases
                .iter()
                .filter(|c| level_key(c.level) == *level)
                .map(|c| c.duration_ms)
                .sum();
            let _ = writeln!(
                x,
                r#"  <testsuite name="{}" tests="{}" failures="{}" errors="0" skipped="{}" time="{:.3}">"#,
                xml(&format!("{} ({}) — {level}", self.target, self.prefix)),
                l.cases,
                l.unexpected,
                l.skipped,
                time as f64 / 1000.0
            );
            let _ = writeln!(x, "    <properties>");
            for (k, v) in [
                ("suite_version", self.suite_version.as_str()),
                ("mode", self.mode.as_str()),
                ("level", level.as_str()),
                ("gate", self.level.as_str()),
            ] {
                let _ = writeln!(x, r#"      <property name="{k}" value="{}"/>"#, xml(v));
            }
            for (k, v) in &self.envelopes {
                let _ = writeln!(
                    x,
                    r#"      <property name="envelope.{}" value="{v}"/>"#,
                    xml(k)
                );
            }
            let _ = writeln!(x, "    </properties>");
            for c in self.cases.iter().filter(|c| level_key(c.level) == *level) {
                self.junit_case(&mut x, c);
            }
            let _ = writeln!(x, "  </testsuite>");
        }
        let _ = writeln!(x, "</testsuites>");
        x
    }

    fn junit_case(&self, x: &mut String, c: &CaseReport) {
        let class = c.id.split('.').next().unwrap_or(&c.id);
        let _ = write!(
            x,
            r#"    <testcase classname="{}.{}" name="{}" time="{:.3}""#,
            xml(&self.target),
            xml(class),
            xml(&c.id),
            c.duration_ms as f64 / 1000.0
        );
        let counted = self.level.counts(c.level);
        let message = c.message.as_deref().unwrap_or("");
        let body = match c.verdict {
            Verdict::Pass => String::new(),
            Verdict::Fail | Verdict::Stale if !counted => format!(
                "      <system-out>outside --level {}: {}</system-out>\n",
                self.level.as_str(),
                xml(message)
            ),
            Verdict::Fail => junit_failure("fail", "failed", message),
            Verdict::Stale => junit_failure("stale-expectation", "stale", message),
            Verdict::Skip => format!(
                "      <skipped message=\"{}\"/>\n",
                xml(c.reason.as_deref().unwrap_or(""))
            ),
            Verdict::ExpectedFail => format!(
                "      <system-out>expected failure ({}): {}</system-out>\n",
                xml(c.reason.as_deref().unwrap_or("")),
                xml(message)
            ),
        };
        if body.is_empty() {
            let _ = writeln!(x, "/>");
        } else {
            let _ = write!(x, ">\n{body}    </testcase>\n");
        }
    }

    /// Writes `--junit`.
    pub(crate) fn write_junit(&self, path: &Path) -> std::io::Result<()> {
        write_file(path, &self.junit())
    }
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// Continuation lines of a multi-line message, indented under its first.
fn indent(s: &str, pad: &str) -> String {
    s.lines().collect::<Vec<_>>().join(&format!("\n{pad}"))
}

/// A JUnit `<failure>` of `kind`: its first line as the message attribute
/// (`fallback` when there is none), the whole text as the body.
fn junit_failure(kind: &str, fallback: &str, message: &str) -> String {
    let head = if message.is_empty() {
        fallback
    } else {
        message
    };
    format!(
        "      <failure message=\"{}\" type=\"{kind}\">{}</failure>\n",
        xml(&first_line(head)),
        xml(message)
    )
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    l.chars().take(200).collect()
}

/// XML-escapes text (and drops characters XML 1.0 cannot carry).
pub(crate) fn xml(s: &str) -> String {
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
pub(crate) struct Progress {
    total: usize,
    done: AtomicUsize,
    enabled: bool,
    out: Mutex<()>,
}

impl Progress {
    pub(crate) fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            total,
            done: AtomicUsize::new(0),
            enabled,
            out: Mutex::new(()),
        }
    }

    /// Prints `[  n/total] VERDICT id (1.23s)` and, for problems, the reason.
    pub(crate) fn case_done(&self, c: &CaseReport) {
        let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.enabled {
            return;
        }
        let width = self.total.to_string().len();
        let mut line = format!(
            "[{n:>width$}/{}] {:<5} {} [{}] ({:.2}s)",
            self.total,
            c.verdict.label(),
            c.id,
            level_key(c.level),
            c.duration_ms as f64 / 1000.0
        );
        match c.verdict {
            Verdict::Fail | Verdict::Stale => {
                if let Some(m) = &c.message {
                    let shown: String = m.chars().take(2000).collect();
                    let _ = write!(line, "\n      {}", indent(&shown, "      "));
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
