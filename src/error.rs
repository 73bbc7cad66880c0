//! The one table of wire codes, and the envelope errors travel in.
//!
//! A worker error leaves as the invocation error body
//! `{"code":"sandbox-code-runner::<code>","message":"sandbox-code-runner::<code>: <detail>"}`:
//! the code field for callers that read it, and the same code at the head of
//! the message for callers that search messages (the upstream envelope).

use std::fmt;

/// Every code this worker sends. Whether a retry helps is documented once per
/// code in the README and in `golden/errors/`; a test keeps the three in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidRequest,
    RuntimeNotFound,
    Expired,
    Capacity,
    Timeout,
    HandlerError,
    Engine,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::InvalidRequest,
        ErrorCode::RuntimeNotFound,
        ErrorCode::Expired,
        ErrorCode::Capacity,
        ErrorCode::Timeout,
        ErrorCode::HandlerError,
        ErrorCode::Engine,
    ];

    pub fn short(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::RuntimeNotFound => "runtime_not_found",
            ErrorCode::Expired => "expired",
            ErrorCode::Capacity => "capacity",
            ErrorCode::Timeout => "timeout",
            ErrorCode::HandlerError => "handler_error",
            ErrorCode::Engine => "engine",
        }
    }

    /// The code as it appears on the wire.
    pub fn wire(self) -> String {
        format!("{}::{}", crate::ids::OWN_NAMESPACE, self.short())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// The engine's code for a call its RBAC refuses.
pub const FORBIDDEN: &str = "FORBIDDEN";

/// A failure of a worker function. A failing script is never one of these:
/// it is a response with `success: false`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkerError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    RuntimeNotFound(String),
    #[error("{0}")]
    Expired(String),
    #[error("{0}")]
    Capacity(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    HandlerError(String),
    #[error("{0}")]
    Engine(String),
    /// Another function's failure, passed on as it came (the guest
    /// listener's middleware relays what the target answered).
    #[error("{0}")]
    Relayed(crate::bus::BusError),
    /// A guest call the worker's policy refuses (`guest_policy`). It leaves
    /// with the engine's own RBAC code, `FORBIDDEN`, so guest code sees one
    /// answer for "not allowed" whether the engine or the worker decided.
    #[error("{0}")]
    Forbidden(String),
}

impl WorkerError {
    pub fn code(&self) -> ErrorCode {
        match self {
            WorkerError::InvalidRequest(_) | WorkerError::Forbidden(_) => ErrorCode::InvalidRequest,
            WorkerError::RuntimeNotFound(_) => ErrorCode::RuntimeNotFound,
            WorkerError::Expired(_) => ErrorCode::Expired,
            WorkerError::Capacity(_) => ErrorCode::Capacity,
            WorkerError::Timeout(_) => ErrorCode::Timeout,
            WorkerError::HandlerError(_) => ErrorCode::HandlerError,
            WorkerError::Engine(_) | WorkerError::Relayed(_) => ErrorCode::Engine,
        }
    }

    pub fn invalid(field: &str, why: impl fmt::Display) -> WorkerError {
        WorkerError::InvalidRequest(format!("`{field}`: {why}"))
    }

    /// The wire body: `(code, message)`.
    pub fn to_wire(&self) -> (String, String) {
        match self {
            WorkerError::Relayed(e) => return (e.code.clone(), e.message.clone()),
            WorkerError::Forbidden(why) => return (FORBIDDEN.into(), why.clone()),
            _ => {}
        }
        let code = self.code().wire();
        let message = format!("{code}: {self}");
        (code, message)
    }

    /// As the SDK error the bus sends unchanged.
    pub(crate) fn into_sdk(self) -> iii_sdk::Error {
        let (code, message) = self.to_wire();
        iii_sdk::Error::Remote {
            code,
            message,
            stacktrace: None,
        }
    }
}

/// Replaces every `rt-<uuid>` in `text` with `rt-<redacted>`, for anything
/// that leaves toward a log or a caller that did not hold the id.
pub(crate) fn redact_runtime_ids(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"rt-")
            && bytes.len() - i >= 3 + 36
            && text.is_char_boundary(i + 39)
            && looks_like_uuid(&text[i + 3..i + 39])
        {
            out.push_str("rt-<redacted>");
            i += 39;
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

/// Replaces every bare UUID in `text` with `<id>`: daemon messages name
/// sandbox ids, which never leave the worker.
pub(crate) fn redact_uuids(text: &str) -> String {
    let red = redact_runtime_ids(text);
    let mut out = String::with_capacity(red.len());
    let mut i = 0;
    while i < red.len() {
        if red.len() - i >= 36 && red.is_char_boundary(i + 36) && looks_like_uuid(&red[i..i + 36]) {
            out.push_str("<id>");
            i += 36;
            continue;
        }
        let ch = red[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_envelope_puts_the_code_in_both_places() {
        let (code, message) = WorkerError::RuntimeNotFound("unknown runtime_id".into()).to_wire();
        assert_eq!(code, "sandbox-code-runner::runtime_not_found");
        assert_eq!(
            message,
            "sandbox-code-runner::runtime_not_found: unknown runtime_id"
        );
    }

    #[test]
    fn every_code_is_distinct_and_namespaced() {
        let wires: std::collections::HashSet<String> =
            ErrorCode::ALL.iter().map(|c| c.wire()).collect();
        assert_eq!(wires.len(), ErrorCode::ALL.len());
        assert!(wires.iter().all(|w| w.starts_with("sandbox-code-runner::")));
    }

    /// The README's error table, the golden error table and [`ErrorCode`]
    /// name the same codes, and the two tables agree on which are retryable.
    #[test]
    fn readme_golden_and_code_tables_agree() {
        let readme = include_str!("../README.md");
        let golden: serde_json::Value =
            serde_json::from_str(include_str!("../golden/errors/sandbox-code-runner.json"))
                .expect("golden error table is JSON");

        let header = readme
            .find("| code | meaning | retry helps |")
            .expect("README has the error table");
        let readme_rows: std::collections::BTreeMap<String, bool> = readme[header..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let code = cells[1].trim_matches('`').to_string();
                (code, cells[3].starts_with("yes"))
            })
            .collect();
        let golden_rows: std::collections::BTreeMap<String, bool> = golden["codes"]
            .as_array()
            .expect("codes array")
            .iter()
            .map(|c| {
                (
                    c["code"].as_str().expect("code").to_string(),
                    c["retryable"].as_bool().expect("retryable"),
                )
            })
            .collect();
        let code_set: std::collections::BTreeSet<String> = ErrorCode::ALL
            .iter()
            .map(|c| c.short().to_string())
            .collect();

        assert_eq!(
            readme_rows
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            code_set,
            "README error table vs ErrorCode"
        );
        assert_eq!(
            golden_rows
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            code_set,
            "golden error table vs ErrorCode"
        );
        assert_eq!(readme_rows, golden_rows, "retryable: README vs golden");
    }

    #[test]
    fn runtime_ids_are_redacted_from_text() {
        let id = crate::ids::RuntimeId::generate();
        let text = format!("before {} after é {}", id.expose(), "rt-notanid");
        let red = redact_runtime_ids(&text);
        assert!(!red.contains(&id.expose()[3..]));
        assert!(red.contains("rt-<redacted>"));
        assert!(red.contains("rt-notanid"));
        assert!(red.contains('é'));
    }

    #[test]
    fn sandbox_ids_are_redacted_from_daemon_messages() {
        let msg = "sandbox not found: 6c1f2a9e-1111-4222-8333-944455556666 (é)";
        assert_eq!(redact_uuids(msg), "sandbox not found: <id> (é)");
    }
}
