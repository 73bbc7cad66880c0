//! Error-code tables (`golden/errors/<target>.json`), the two wire
//! envelopes, and the closed-world check.
//!
//! Envelopes (docs/contract.md, "Errors on the wire"):
//! - **code field**: `{"code":"<prefix>::<code>","message":"<prefix>::<code>: …"}`;
//! - **upstream**: `{"code":"invocation_failed","message":"handler error: <prefix>::<code>: …"}`.
//!
//! Closed world, both ways:
//! - every code in the table is expected by at least one case applicable to
//!   the target, or carries a written `no_case_reason` (and not both: a
//!   reason beside a producing case is stale);
//! - no case expects, and no run observes, a target code missing from the
//!   table.

use super::load_error::LoadError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One row of a table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorEntry {
    /// Short code, without the target prefix.
    pub code: String,
    pub meaning: String,
    pub retryable: bool,
    /// Why no case can produce this code (then no case may).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_case_reason: Option<String>,
}

/// A target's error table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorTable {
    pub target: String,
    #[serde(default)]
    pub source: String,
    pub codes: Vec<ErrorEntry>,
}

impl ErrorTable {
    pub fn load(dir: &Path, target: &str) -> Result<ErrorTable, LoadError> {
        let path = dir.join(format!("{target}.json"));
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let t: ErrorTable = serde_json::from_str(&text).map_err(|e| LoadError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let mut seen = BTreeSet::new();
        for e in &t.codes {
            if !seen.insert(e.code.clone()) || e.code.contains("::") {
                return Err(LoadError::Invalid {
                    path: path.display().to_string(),
                    message: format!("code `{}` is duplicated or not a short code", e.code),
                });
            }
        }
        Ok(t)
    }

    pub(crate) fn has(&self, code: &str) -> bool {
        self.codes.iter().any(|e| e.code == code)
    }
}

/// How a target error travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// `code` is the full code.
    CodeField,
    /// `code` is `invocation_failed`; the message carries `handler error: <code>`.
    Upstream,
}

impl Envelope {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Envelope::CodeField => "code_field",
            Envelope::Upstream => "upstream",
        }
    }
}

/// What an error on the wire is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A code of the target, short form.
    Target { code: String, envelope: Envelope },
    /// A code of the engine or the SDK (`function_not_found`, `NOT_FOUND`…).
    Engine(String),
    /// `invocation_failed` without a recognizable target code.
    Unclassified { code: String },
}

fn short_code_at(s: &str) -> Option<String> {
    let code: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (!code.is_empty()).then_some(code)
}

/// Classifies a wire error of a call, for a target with `prefix`.
pub fn classify(prefix: &str, code: &str, message: &str) -> Observed {
    let head = format!("{prefix}::");
    if let Some(short) = code.strip_prefix(&head) {
        return Observed::Target {
            code: short.to_string(),
            envelope: Envelope::CodeField,
        };
    }
    if code == "invocation_failed" {
        // The code travels in the message: after the Rust SDK's
        // `handler error: ` prefix, or at its very start (the Python and
        // Node SDKs send a raised error's message as it is).
        let after = message
            .find(&format!("handler error: {head}"))
            .map(|at| at + "handler error: ".len() + head.len())
            .or_else(|| {
                message
                    .trim_start()
                    .starts_with(&head)
                    .then(|| message.len() - message.trim_start().len() + head.len())
            });
        if let Some(short) = after.and_then(|at| short_code_at(&message[at..])) {
            return Observed::Target {
                code: short,
                envelope: Envelope::Upstream,
            };
        }
        return Observed::Unclassified {
            code: code.to_string(),
        };
    }
    Observed::Engine(code.to_string())
}

/// One closed-world finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Violation {
    pub code: String,
    pub(crate) problem: String,
}

/// The static half: table × the cases applicable to the target
/// (`(case id, short codes it expects)`).
pub fn closed_world_static(
    table: &ErrorTable,
    cases: &[(String, BTreeSet<String>)],
) -> Vec<Violation> {
    let mut producers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, codes) in cases {
        for c in codes {
            producers.entry(c.as_str()).or_default().push(id.as_str());
        }
    }
    let mut out = Vec::new();
    for e in &table.codes {
        let by = producers.get(e.code.as_str());
        match (by, &e.no_case_reason) {
            (None, None) => out.push(Violation {
                code: e.code.clone(),
                problem: "no case produces it and it has no `no_case_reason`".into(),
            }),
            (Some(ids), Some(_)) => out.push(Violation {
                code: e.code.clone(),
                problem: format!("`no_case_reason` is stale: produced by {}", ids.join(", ")),
            }),
            _ => {}
        }
    }
    for (code, ids) in &producers {
        if !table.has(code) {
            out.push(Violation {
                code: code.to_string(),
                problem: format!("expected by {} but missing from the table", ids.join(", ")),
            });
        }
    }
    out.sort();
    out
}

/// The dynamic half: every target code a run observed must be in the table;
/// an `invocation_failed` from a target function must carry a target code.
pub fn closed_world_observed(
    table: &ErrorTable,
    observed: &[(String, Observed)],
) -> Vec<Violation> {
    let mut out = BTreeSet::new();
    for (case, o) in observed {
        match o {
            Observed::Target { code, .. } if !table.has(code) => {
                out.insert(Violation {
                    code: code.clone(),
                    problem: format!("observed in case {case} but missing from the table"),
                });
            }
            Observed::Unclassified { code } => {
                out.insert(Violation {
                    code: code.clone(),
                    problem: format!(
                        "case {case}: a target function failed with `{code}` and no target code in the message"
                    ),
                });
            }
            _ => {}
        }
    }
    out.into_iter().collect()
}
