//! The S-code error envelope, as the real iii-sandbox daemon puts it on the
//! wire.
//!
//! A failed `sandbox::*` call reaches the caller as
//! `{"code":"invocation_failed","message":"handler error: {json}"}`: the
//! handler returns `iii_sdk::Error::Handler(json)` and the SDK prefixes it.
//! `json` is one object whose keys come out alphabetically (`code`,
//! `docs_url`, `fix`, `fix_note`, `message`, `retryable`, `type`) because the
//! daemon serialises a `serde_json::Map` without `preserve_order`. This module
//! builds it from a `BTreeMap`, so the order holds even if some other crate in
//! the build turns `preserve_order` on.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// Where every `docs_url` points, followed by `#<code>`.
pub(crate) const DOCS_BASE: &str =
    "https://github.com/iii-hq/iii/blob/main/crates/iii-worker/src/sandbox_daemon/README.md#";

/// `fix_note` of S001.
const NOTE_INVALID: &str = "see message: examples are inline";
/// `fix_note` of S002 and S004.
const NOTE_GONE: &str = "the sandbox is gone; call sandbox::create first";
/// `fix_note` of S100.
const NOTE_IMAGE: &str =
    "set `image` to a value listed in the message or add a custom_images entry in iii.config.yaml";
/// `fix_note` of S200.
const NOTE_TIMEOUT: &str =
    "raise `timeout_ms` on the exec call or split the work into smaller steps";
/// `fix_note` of S300 and S400.
const NOTE_PLATFORM: &str = "platform-level failure; not auto-recoverable";
/// `fix_note` of S211 when a parent directory is missing.
const NOTE_PARENTS: &str = "merge `fix` into the original request and resubmit: `parents: true` auto-creates missing intermediate directories";
/// `fix_note` of S003, verbatim from the daemon (its advice to detach servers
/// does not hold on this double: an exec's background processes die with it).
const NOTE_EXEC_CAP: &str = "this sandbox already has max_concurrent_exec_per_sandbox execs running (default 4); execs run concurrently but are capped, because the guest defaults to 1 vCPU and 512 MB and enough simultaneous interpreters OOM it. If those in-flight execs are long-running or FOREGROUND processes (a server, `npm install`, a build/watch), waiting will NOT free a slot — each holds until it exits or hits its timeout_ms (default 300s). Detach servers with `nohup <cmd> > /tmp/out.log 2>&1 &` and read progress via sandbox::fs::read, or sandbox::stop + sandbox::create to reset. Retry-after-wait only helps for short commands.";

/// The S-codes this double can produce. Callers branch on them, so they are
/// spelled exactly as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SCode {
    S001,
    S002,
    S003,
    S004,
    S100,
    S200,
    S210,
    S211,
    S212,
    S213,
    S215,
    S216,
    S218,
    S300,
    S400,
}

impl SCode {
    /// The code as it appears in `code`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SCode::S001 => "S001",
            SCode::S002 => "S002",
            SCode::S003 => "S003",
            SCode::S004 => "S004",
            SCode::S100 => "S100",
            SCode::S200 => "S200",
            SCode::S210 => "S210",
            SCode::S211 => "S211",
            SCode::S212 => "S212",
            SCode::S213 => "S213",
            SCode::S215 => "S215",
            SCode::S216 => "S216",
            SCode::S218 => "S218",
            SCode::S300 => "S300",
            SCode::S400 => "S400",
        }
    }

    /// The envelope's `type`.
    pub(crate) fn error_type(self) -> &'static str {
        match self {
            SCode::S001 | SCode::S002 | SCode::S003 | SCode::S004 => "validation",
            SCode::S100 | SCode::S400 => "config",
            SCode::S200 => "execution",
            SCode::S218 => "transient",
            SCode::S210 | SCode::S211 | SCode::S212 | SCode::S213 | SCode::S215 | SCode::S216 => {
                "filesystem"
            }
            SCode::S300 => "platform",
        }
    }
}

/// A failed `sandbox::*` call. `Display` is the envelope's `message`, worded
/// as the daemon words it (fs messages carry the supervisor's own text after
/// a kind prefix, hence e.g. "file not found: path not found: /x").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DaemonError {
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("sandbox not found: {0}")]
    NotFound(String),
    #[error("sandbox {0} is at its exec concurrency cap (max_concurrent_exec_per_sandbox)")]
    ConcurrentExec(String),
    #[error("sandbox already stopped: {0}")]
    AlreadyStopped(String),
    #[error("image '{0}' not in catalog; valid presets are 'python' and 'node', or add a custom image via worker config (see S100 docs)")]
    ImageNotInCatalog(String),
    #[error("exec timed out after {0} ms")]
    ExecTimedOut(u64),
    #[error("VM boot failed: {0}")]
    BootFailed(String),
    #[error("resource limit exceeded: {0}")]
    ResourceLimit(String),
    #[error("{0}")]
    FsInvalidRequest(String),
    #[error("file not found: {0}")]
    FsNotFound(String),
    #[error("parent directory not found: {0}")]
    FsParentNotFound(String),
    #[error("not a directory or wrong type: {0}")]
    FsWrongType(String),
    #[error("already exists: {0}")]
    FsAlreadyExists(String),
    #[error("permission denied: {0}")]
    FsPermission(String),
    #[error("fs i/o error: {0}")]
    FsIo(String),
    /// A `fs::write` data channel that stalled: retryable.
    #[error("fs channel aborted: {0}")]
    FsChannelAborted(String),
    /// A `sandbox::run` sub-step failed: the inner code stays the wire code,
    /// the step and sandbox id travel in `fix`.
    #[error("during sandbox::run step `{step}` (sandbox_id={sandbox_id}): {message}")]
    RunStepFailed {
        step: String,
        sandbox_id: String,
        message: String,
        inner: SCode,
    },
}

impl DaemonError {
    /// The wire code.
    pub(crate) fn code(&self) -> SCode {
        match self {
            DaemonError::InvalidRequest(_) => SCode::S001,
            DaemonError::NotFound(_) => SCode::S002,
            DaemonError::ConcurrentExec(_) => SCode::S003,
            DaemonError::AlreadyStopped(_) => SCode::S004,
            DaemonError::ImageNotInCatalog(_) => SCode::S100,
            DaemonError::ExecTimedOut(_) => SCode::S200,
            DaemonError::BootFailed(_) => SCode::S300,
            DaemonError::ResourceLimit(_) => SCode::S400,
            DaemonError::FsInvalidRequest(_) => SCode::S210,
            DaemonError::FsNotFound(_) | DaemonError::FsParentNotFound(_) => SCode::S211,
            DaemonError::FsWrongType(_) => SCode::S212,
            DaemonError::FsAlreadyExists(_) => SCode::S213,
            DaemonError::FsPermission(_) => SCode::S215,
            DaemonError::FsIo(_) => SCode::S216,
            DaemonError::FsChannelAborted(_) => SCode::S218,
            DaemonError::RunStepFailed { inner, .. } => *inner,
        }
    }

    /// `(fix, fix_note)` as the daemon fills them.
    fn fix(&self) -> (Value, Value) {
        let note = |s: &str| Value::String(s.to_string());
        match self {
            DaemonError::InvalidRequest(_) => (Value::Null, note(NOTE_INVALID)),
            DaemonError::NotFound(_) | DaemonError::AlreadyStopped(_) => {
                (Value::Null, note(NOTE_GONE))
            }
            DaemonError::ConcurrentExec(_) => (Value::Null, note(NOTE_EXEC_CAP)),
            DaemonError::ImageNotInCatalog(_) => (Value::Null, note(NOTE_IMAGE)),
            DaemonError::ExecTimedOut(_) => (Value::Null, note(NOTE_TIMEOUT)),
            DaemonError::BootFailed(_) | DaemonError::ResourceLimit(_) => {
                (Value::Null, note(NOTE_PLATFORM))
            }
            DaemonError::FsParentNotFound(_) => (json!({ "parents": true }), note(NOTE_PARENTS)),
            DaemonError::RunStepFailed {
                step,
                sandbox_id,
                inner,
                ..
            } => (
                json!({
                    "context": format!("during sandbox::run step `{step}`"),
                    "inner_code": inner.as_str(),
                    "sandbox_id": sandbox_id,
                }),
                Value::Null,
            ),
            DaemonError::FsInvalidRequest(_)
            | DaemonError::FsNotFound(_)
            | DaemonError::FsWrongType(_)
            | DaemonError::FsAlreadyExists(_)
            | DaemonError::FsPermission(_)
            | DaemonError::FsIo(_)
            | DaemonError::FsChannelAborted(_) => (Value::Null, Value::Null),
        }
    }

    /// The envelope's fields, in wire order.
    fn envelope(&self) -> BTreeMap<&'static str, Value> {
        let code = self.code();
        let (fix, fix_note) = self.fix();
        let mut map: BTreeMap<&'static str, Value> = BTreeMap::new();
        map.insert("code", Value::String(code.as_str().to_string()));
        map.insert(
            "docs_url",
            Value::String(format!("{DOCS_BASE}{}", code.as_str())),
        );
        map.insert("fix", fix);
        map.insert("fix_note", fix_note);
        map.insert("message", Value::String(self.to_string()));
        // The daemon's one retryable code is S218, a stalled data channel.
        map.insert("retryable", Value::Bool(code == SCode::S218));
        map.insert("type", Value::String(code.error_type().to_string()));
        map
    }

    /// The envelope as a JSON value.
    #[cfg(test)]
    pub(crate) fn payload(&self) -> Value {
        json!(self.envelope())
    }

    /// The envelope serialised the way the handler hands it to the SDK.
    pub(crate) fn wire_json(&self) -> String {
        // A BTreeMap of strings and JSON values always serialises.
        serde_json::to_string(&self.envelope()).unwrap_or_else(|_| self.to_string())
    }

    /// Wraps a failure of one `sandbox::run` step.
    pub(crate) fn run_step(step: &str, sandbox_id: &str, inner: DaemonError) -> DaemonError {
        DaemonError::RunStepFailed {
            step: step.to_string(),
            sandbox_id: sandbox_id.to_string(),
            message: inner.to_string(),
            inner: inner.code(),
        }
    }
}

impl From<DaemonError> for iii_sdk::Error {
    /// `Error::Handler` (not `Remote`) on purpose: the SDK then sends
    /// `invocation_failed` with `handler error: {json}`, as the daemon does.
    fn from(err: DaemonError) -> Self {
        iii_sdk::Error::Handler(err.wire_json())
    }
}

/// Classifies an I/O error the way the in-VM supervisor does, with `path`
/// being the path the caller asked for.
pub(crate) fn from_io(path: &str, err: &std::io::Error) -> DaemonError {
    match err.kind() {
        std::io::ErrorKind::NotFound => DaemonError::FsNotFound(format!("path not found: {path}")),
        std::io::ErrorKind::AlreadyExists => {
            DaemonError::FsAlreadyExists(format!("path already exists: {path}"))
        }
        std::io::ErrorKind::PermissionDenied => DaemonError::FsPermission(format!("{path}: {err}")),
        _ => DaemonError::FsIo(format!("{path}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_alphabetical_and_complete() {
        let e = DaemonError::NotFound("abc".into());
        let s = e.wire_json();
        assert_eq!(
            s,
            format!(
                "{{\"code\":\"S002\",\"docs_url\":\"{DOCS_BASE}S002\",\"fix\":null,\"fix_note\":\"{NOTE_GONE}\",\"message\":\"sandbox not found: abc\",\"retryable\":false,\"type\":\"validation\"}}"
            )
        );
        assert_eq!(serde_json::from_str::<Value>(&s).ok(), Some(e.payload()));
    }

    #[test]
    fn handler_error_prefix_is_the_sdks() {
        let err: iii_sdk::Error = DaemonError::ExecTimedOut(500).into();
        let text = err.to_string();
        assert!(
            text.starts_with("handler error: {\"code\":\"S200\""),
            "{text}"
        );
    }

    #[test]
    fn run_step_keeps_inner_code_and_fills_fix() {
        let inner = DaemonError::ImageNotInCatalog("ubuntu".into());
        let e = DaemonError::run_step("create", "", inner);
        let p = e.payload();
        assert_eq!(p["code"], "S100");
        assert_eq!(p["type"], "config");
        assert_eq!(p["fix"]["inner_code"], "S100");
        assert_eq!(p["fix"]["context"], "during sandbox::run step `create`");
        assert!(p["fix_note"].is_null());
        assert!(p["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("during sandbox::run step `create` (sandbox_id=): image 'ubuntu'"));
    }

    #[test]
    fn a_stalled_channel_is_the_one_retryable_code() {
        let p = DaemonError::FsChannelAborted("stalled".into()).payload();
        assert_eq!(p["code"], "S218");
        assert_eq!(p["type"], "transient");
        assert_eq!(p["retryable"], true);
        assert_eq!(p["message"], "fs channel aborted: stalled");
        assert!(p["fix"].is_null() && p["fix_note"].is_null());
        assert_eq!(DaemonError::FsIo("x".into()).payload()["retryable"], false);
    }

    #[test]
    fn parent_missing_carries_parents_fix() {
        let e = DaemonError::FsParentNotFound("parent not found: /a".into());
        let p = e.payload();
        assert_eq!(p["code"], "S211");
        assert_eq!(p["fix"], json!({"parents": true}));
        assert_eq!(
            p["message"],
            "parent directory not found: parent not found: /a"
        );
    }
}
