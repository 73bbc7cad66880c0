//! What a target publishes, against what its profile lists, and which error
//! envelope it answers in — printed before a run starts, so a worker that
//! differs from its profile is told how before any case runs.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde::Serialize;
use serde_json::json;

use super::errors::{classify, Observed};

/// The profile's functions split by whether the target publishes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Published {
    /// Function suffixes the profile lists and the target publishes.
    pub present: Vec<String>,
    /// Listed by the profile, not published: cases needing them fail.
    pub missing: Vec<String>,
    /// Published under the prefix, not listed by the profile.
    pub extra: Vec<String>,
}

impl Published {
    /// Splits `listed` (suffixes) by the full ids `published` under `prefix`.
    pub fn compare(prefix: &str, listed: &[String], published: &BTreeSet<String>) -> Published {
        let full = |f: &str| format!("{prefix}::{f}");
        let (present, missing): (Vec<String>, Vec<String>) = listed
            .iter()
            .cloned()
            .partition(|f| published.contains(&full(f)));
        let head = format!("{prefix}::");
        let extra = published
            .iter()
            .filter_map(|id| id.strip_prefix(&head))
            .filter(|f| !listed.iter().any(|l| l == f))
            .map(str::to_string)
            .collect();
        Published {
            present,
            missing,
            extra,
        }
    }

    /// Whether the target publishes `suffix`.
    pub fn has(&self, suffix: &str) -> bool {
        !self.missing.iter().any(|m| m == suffix)
    }

    /// The lines printed at the start of a run.
    pub(crate) fn render(&self, prefix: &str, envelope: &EnvelopeProbe) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let mut out = String::new();
        let _ = writeln!(out, "target functions under {prefix}::");
        let _ = writeln!(out, "  present: {}", list(&self.present));
        let _ = writeln!(
            out,
            "  missing: {}{}",
            list(&self.missing),
            if self.missing.is_empty() {
                ""
            } else {
                " (listed by the profile; the cases needing them fail)"
            }
        );
        let _ = writeln!(out, "  extra:   {}", list(&self.extra));
        let _ = writeln!(out, "error envelope: {}", envelope.describe());
        out
    }
}

/// Every function id the engine lists under `prefix::` (internal ones too).
/// `None` when the engine does not answer `engine::functions::list`.
pub(crate) async fn listed_under(client: &IIIClient, prefix: &str) -> Option<BTreeSet<String>> {
    let answer = client
        .trigger(TriggerRequest {
            function_id: "engine::functions::list".into(),
            payload: json!({ "prefix": format!("{prefix}::"), "include_internal": true }),
            action: None,
            timeout_ms: Some(10_000),
        })
        .await
        .ok()?;
    Some(
        answer
            .get("functions")?
            .as_array()?
            .iter()
            .filter_map(|f| f.get("function_id")?.as_str())
            .filter(|id| id.starts_with(&format!("{prefix}::")))
            .map(str::to_string)
            .collect(),
    )
}

/// What the envelope probe saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct EnvelopeProbe {
    /// `code_field`, `upstream`, or `unknown`.
    pub(crate) envelope: String,
    /// The call made and what came back, for the reader.
    pub(crate) evidence: String,
}

impl EnvelopeProbe {
    pub(crate) fn describe(&self) -> String {
        format!("{} ({})", self.envelope, self.evidence)
    }
}

/// Calls a function of the target with a payload every code-runner refuses
/// (`teardown {}`: neither field; else `run {}`: no lang, no code) and
/// classifies the error that comes back.
pub(crate) async fn probe_envelope(
    client: &IIIClient,
    prefix: &str,
    published: &Published,
) -> EnvelopeProbe {
    let Some(function) = ["teardown", "run", "register_function"]
        .into_iter()
        .find(|f| published.present.iter().any(|p| p == f))
    else {
        return EnvelopeProbe {
            envelope: "unknown".into(),
            evidence: "no run, teardown or register_function to probe".into(),
        };
    };
    let id = format!("{prefix}::{function}");
    let r = client
        .trigger(TriggerRequest {
            function_id: id.clone(),
            payload: json!({}),
            action: None,
            timeout_ms: Some(30_000),
        })
        .await;
    let (envelope, evidence) = match r {
        Ok(v) => (
            "unknown".to_string(),
            format!(
                "{id} {{}} answered {} instead of an error",
                short(&v.to_string())
            ),
        ),
        Err(iii_sdk::Error::Remote { code, message, .. }) => {
            let seen = format!("{id} {{}} → code {code:?}, message {:?}", short(&message));
            match classify(prefix, &code, &message) {
                Observed::Target { envelope, .. } => (envelope.as_str().to_string(), seen),
                _ => ("unknown".to_string(), seen),
            }
        }
        Err(e) => ("unknown".to_string(), format!("{id} {{}} failed: {e}")),
    };
    EnvelopeProbe { envelope, evidence }
}

fn short(s: &str) -> String {
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The function suffixes a step list triggers (`trigger: X`), placeholders
/// left as written.
pub(crate) fn triggered(steps: &[&super::case::Step]) -> BTreeSet<String> {
    steps.iter().filter_map(|s| s.trigger.clone()).collect()
}
