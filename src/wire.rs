//! Request and response types of the three functions, with the JSON Schemas
//! registered on the bus. Field names, types and optionality follow the
//! published code-runner schemas (without code-runner's additions), so a
//! caller can switch between the two workers.

use std::fmt;

use schemars::{schema_for, JsonSchema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::WorkerError;
use crate::ids::Lang;

/// Input of `sandbox-code-runner::run`.
// `Debug` redacts `runtime_id` (not in the published schema's text).
#[derive(Clone, Deserialize, JsonSchema)]
#[schemars(title = "RunRequest")]
pub struct RunRequest {
    /// Source to run: an ES module (node; top-level await works) or a script
    /// run as `__main__` (python). A global `iii` is in scope.
    pub code: String,
    /// Without `runtime_id`: `true` keeps the VM and returns its `runtime_id`;
    /// `false` (default) destroys it before answering.
    #[serde(default)]
    pub keep: bool,
    /// Required without `runtime_id`; with one, omit it or repeat the
    /// runtime's own language.
    #[serde(default)]
    pub lang: Option<Lang>,
    /// Run in this kept runtime: same filesystem; a fresh process unless
    /// the runtime was kept with a session (`session`).
    #[serde(default)]
    pub runtime_id: Option<String>,
    /// Wall-clock budget in ms; missing or 0 means the configured default,
    /// and every value is clamped to the configured maximum.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// With `keep: true`: whether later runs into the runtime execute in
    /// the same interpreter, seeing the globals and imported modules of the
    /// runs before them as a notebook's cells do (only `result` is cleared
    /// between runs). Default: the worker's `sessions` setting (off unless
    /// its operator turned it on). Fixed when the runtime is kept: with a
    /// `runtime_id`, omit it or repeat the runtime's own.
    #[serde(default)]
    pub session: Option<bool>,
    /// A data channel's writer ref (`engine::channels::create`'s
    /// `writer`, direction `write`): the run's stdout and stderr are
    /// written to it as they are produced, as text frames
    /// `{"seq", "type": "stdout"|"stderr", "data"}`, then one
    /// `{"seq", "type": "end", …}` frame with the answer's verdict. The
    /// answer is unchanged (and says what was dropped, in `output`). A
    /// secret, as the ref's `access_key` is.
    #[serde(default)]
    pub output: Option<ChannelRef>,
}

/// A data channel's end, as the engine hands it out
/// (`engine::channels::create`). Its `access_key` opens the channel.
#[derive(Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChannelRef {
    pub channel_id: String,
    pub access_key: String,
    /// `write` for a run's `output`.
    pub direction: String,
}

impl fmt::Debug for ChannelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelRef")
            .field("channel_id", &self.channel_id)
            .field("access_key", &"<redacted>")
            .field("direction", &self.direction)
            .finish()
    }
}

/// Input of `sandbox-code-runner::watch`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(title = "WatchRequest")]
pub struct WatchRequest {
    /// The run's `output`, the writer ref it was given: only its holder
    /// reads what the run streams.
    pub output: ChannelRef,
    /// The last `seq` the watcher already has (the previous answer's
    /// `next`); omitted: from the oldest frame held.
    #[serde(default)]
    pub after: Option<u64>,
}

/// What became of a streamed run's frames (`RunResponse::output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct OutputSummary {
    /// Frames of stdout and stderr made (sequence numbers 0 to frames - 1;
    /// the end frame's is `frames`).
    pub frames: u64,
    /// Of those, frames the reader did not take in time (a slow or gone
    /// reader): their sequence numbers are missing from the stream. The
    /// answer's `stdout` and `stderr` still hold them, within their caps.
    pub dropped: u64,
    /// Whether a stream passed what is streamed of it (4 MiB each): what
    /// came after is only in the answer.
    pub cut: bool,
}

/// Output of `sandbox-code-runner::run`. A failing script is still this.
// `Debug` redacts `runtime_id`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "RunResponse")]
pub struct RunResponse {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i64,
    pub success: bool,
    pub duration_ms: u64,
    /// The completion value: what node code returned (code that is an
    /// async function body: `return x`) or what python code assigned to
    /// `result`. Null when there is none, when JSON cannot represent it, or
    /// when the run failed; over `max_result_bytes` it is replaced whole by
    /// an `<omitted: …>` marker string. Always present.
    pub result: serde_json::Value,
    /// Present only when the run addresses a runtime that outlives the call
    /// (a successful `keep: true` run, or an echoed `runtime_id`). A secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<String>,
    /// Present only for a run in a session: `new` (its interpreter started
    /// with this run), `continued` (it saw the runs before it), or `reset`
    /// (the interpreter was lost, to a timeout or an exit, so this run
    /// started a fresh one on the same files: earlier globals are gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionState>,
    /// Present only for a run given `output`: what became of its frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSummary>,
}

/// What a run in a session found (`RunResponse::session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    New,
    Continued,
    Reset,
}

/// Input of `sandbox-code-runner::register_function`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(title = "RegisterRequest")]
pub struct RegisterRequest {
    /// `<namespace>::<name>`; the namespace holds one runtime per language.
    pub function_id: String,
    /// Language of the handler and of its namespace runtime.
    pub lang: Lang,
    /// Defines `handler(payload)`: `export function handler(payload)` (node)
    /// or `def handler(payload):` (python).
    pub source: String,
    /// Shown by `engine::functions::info`.
    #[serde(default)]
    pub description: Option<String>,
    /// Optional JSON Schema object for the payload (at most 16 KiB, and it
    /// must constrain something: `type`, `properties`, `$ref`, …); shown by
    /// `engine::functions::info` in place of "any", not enforced.
    #[serde(default)]
    pub request_format: Option<Value>,
    /// Optional JSON Schema for the handler's return value; same rules as
    /// `request_format`.
    #[serde(default)]
    pub response_format: Option<Value>,
}

/// What callers of a published function are shown: its description and
/// schemas, as the registration gave them (checked at the edge).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shown {
    pub description: Option<String>,
    pub request_format: Option<Value>,
    pub response_format: Option<Value>,
}

/// Largest `request_format` / `response_format`, as JSON.
pub(crate) const MAX_FORMAT_BYTES: usize = 16 * 1024;

/// Keywords that make a schema constrain something.
const CONSTRAINING: [&str; 10] = [
    "type",
    "properties",
    "$ref",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "items",
    "required",
];

/// A registration's `field` schema, checked by seed 001's rules: a JSON
/// object of at most 16 KiB that constrains something. `None` and `null`
/// mean none.
pub(crate) fn check_format(
    field: &str,
    schema: Option<Value>,
) -> Result<Option<Value>, WorkerError> {
    let Some(schema) = schema.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Value::Object(map) = &schema else {
        return Err(WorkerError::invalid(field, "must be a JSON Schema object"));
    };
    if serde_json::to_string(&schema).map_or(0, |t| t.len()) > MAX_FORMAT_BYTES {
        return Err(WorkerError::invalid(field, "is larger than 16 KiB"));
    }
    if !CONSTRAINING.iter().any(|k| map.contains_key(*k)) {
        return Err(WorkerError::invalid(
            field,
            "must constrain something (type, properties, $ref, enum, …); leave it out for any",
        ));
    }
    Ok(Some(schema))
}

/// Output of `sandbox-code-runner::register_function`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "RegisterResponse")]
pub struct RegisterResponse {
    pub function_id: String,
    pub registered: bool,
}

/// Input of `sandbox-code-runner::teardown`: exactly one of the two fields.
// `Debug` redacts `runtime_id`.
#[derive(Clone, Deserialize, JsonSchema)]
#[schemars(title = "TeardownRequest")]
pub struct TeardownRequest {
    #[serde(default)]
    pub runtime_id: Option<String>,
    /// `app` or `app::`.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// Output of `sandbox-code-runner::teardown`.
// `Debug` redacts `runtime_id`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "TeardownResponse")]
pub struct TeardownResponse {
    /// Echoed when the teardown was addressed by runtime id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<String>,
    /// Echoed in canonical `app::` form when addressed by namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub torn_down: bool,
    /// Bus function ids this teardown unregistered.
    pub unregistered: Vec<String>,
}

/// How a `runtime_id` field prints in `Debug`: whether it is there, never
/// its value, so a stray `?req` in a log cannot leak the capability.
fn redacted(id: &Option<String>) -> Option<&'static str> {
    id.as_ref().map(|_| "rt-<redacted>")
}

impl fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunRequest")
            .field("code_bytes", &self.code.len())
            .field("keep", &self.keep)
            .field("lang", &self.lang)
            .field("runtime_id", &redacted(&self.runtime_id))
            .field("timeout_ms", &self.timeout_ms)
            .field("session", &self.session)
            .field("output", &self.output)
            .finish()
    }
}

impl fmt::Debug for RunResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunResponse")
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("exit_code", &self.exit_code)
            .field("success", &self.success)
            .field("duration_ms", &self.duration_ms)
            .field("runtime_id", &redacted(&self.runtime_id))
            .field("session", &self.session)
            .field("output", &self.output)
            .finish()
    }
}

impl fmt::Debug for TeardownRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TeardownRequest")
            .field("runtime_id", &redacted(&self.runtime_id))
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl fmt::Debug for TeardownResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TeardownResponse")
            .field("runtime_id", &redacted(&self.runtime_id))
            .field("namespace", &self.namespace)
            .field("torn_down", &self.torn_down)
            .field("unregistered", &self.unregistered)
            .finish()
    }
}

/// The registered schema of a type.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schema_for!(T)).unwrap_or(Value::Null)
}

/// `payload` without the engine's bookkeeping (`_caller_worker_id`), which
/// is not the caller's input.
fn without_engine_fields(mut payload: Value) -> Value {
    if let Value::Object(map) = &mut payload {
        map.remove("_caller_worker_id");
    }
    payload
}

/// What a caller of a published handler passed: any JSON, with the
/// engine's bookkeeping already removed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HandlerPayload(Value, Option<String>);

impl HandlerPayload {
    /// Decodes a handler call at the edge.
    pub(crate) fn decode(payload: Value) -> HandlerPayload {
        let caller = payload
            .get("_caller_worker_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        HandlerPayload(without_engine_fields(payload), caller)
    }

    /// Who called, as the engine says (its `_caller_worker_id`): what the
    /// runtime's queue tells callers apart by.
    pub(crate) fn caller(&self) -> Option<&str> {
        self.1.as_deref()
    }

    /// The tenant's payload, as its handler receives it.
    pub(crate) fn value(&self) -> &Value {
        &self.0
    }
}

/// Decodes a request at the edge; a bad payload becomes `invalid_request`
/// naming the offending field.
pub fn decode<T: DeserializeOwned>(payload: Value) -> Result<T, WorkerError> {
    if !payload.is_object() {
        return Err(WorkerError::InvalidRequest(
            "the payload must be a JSON object".into(),
        ));
    }
    let payload = without_engine_fields(payload);
    serde_path_to_error::deserialize(payload).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            WorkerError::InvalidRequest(inner)
        } else {
            WorkerError::invalid(&path, inner)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_name_the_field() {
        let e = decode::<RunRequest>(json!({"code": 5})).unwrap_err();
        assert!(
            matches!(&e, WorkerError::InvalidRequest(m) if m.contains("`code`")),
            "{e}"
        );
        let e = decode::<RunRequest>(json!({"code": "x", "lang": "ruby"})).unwrap_err();
        assert!(
            matches!(&e, WorkerError::InvalidRequest(m) if m.contains("`lang`")),
            "{e}"
        );
        let e = decode::<RunRequest>(json!({})).unwrap_err();
        assert!(
            matches!(&e, WorkerError::InvalidRequest(m) if m.contains("code")),
            "{e}"
        );
        let e = decode::<RunRequest>(json!("code")).unwrap_err();
        assert!(matches!(e, WorkerError::InvalidRequest(_)));
    }

    #[test]
    fn unknown_fields_and_caller_id_are_ignored() {
        let r: RunRequest = decode(json!({
            "code": "x", "lang": "node", "network": true, "_caller_worker_id": "w"
        }))
        .unwrap();
        assert_eq!(r.lang, Some(Lang::Node));
        assert!(!r.keep);
    }

    /// A run's `output` ref opens its caller's channel: its key is never
    /// printed (threat model, "output streams").
    #[test]
    fn debug_never_prints_an_output_key() {
        let key = "k-0123456789abcdef";
        let r: RunRequest = decode(json!({
            "code": "x", "lang": "python",
            "output": {"channel_id": "c1", "access_key": key, "direction": "write"}
        }))
        .unwrap();
        let printed = format!("{r:?}");
        assert!(!printed.contains(key), "{printed}");
        assert!(printed.contains("c1"), "{printed}");
    }

    #[test]
    fn debug_never_prints_a_runtime_id() {
        let id = crate::ids::RuntimeId::generate();
        let secret = id.expose().to_string();
        let run_req: RunRequest = decode(json!({"code": "x", "runtime_id": secret})).unwrap();
        let run_resp = RunResponse {
            stdout: "out".into(),
            stderr: String::new(),
            exit_code: 0,
            success: true,
            duration_ms: 1,
            result: Value::Null,
            runtime_id: Some(secret.clone()),
            session: Some(SessionState::Continued),
            output: None,
        };
        let td_req: TeardownRequest = decode(json!({"runtime_id": secret})).unwrap();
        let td_resp = TeardownResponse {
            runtime_id: Some(secret.clone()),
            namespace: None,
            torn_down: true,
            unregistered: vec![],
        };
        for printed in [
            format!("{run_req:?}"),
            format!("{run_resp:?}"),
            format!("{td_req:?}"),
            format!("{td_resp:#?}"),
        ] {
            assert!(!printed.contains(&secret[3..]), "{printed}");
            assert!(printed.contains("rt-<redacted>"), "{printed}");
        }
    }

    /// Every struct in the worker whose fields can hold a runtime id as a
    /// plain string must not derive `Debug`: this scans the sources, so a new
    /// struct cannot slip past the hand-written impls above.
    #[test]
    fn no_struct_holding_a_runtime_id_string_derives_debug() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let mut derive_debug = false;
                let mut in_struct: Option<String> = None;
                for line in text.lines() {
                    let t = line.trim();
                    if t.starts_with("#[derive(") {
                        derive_debug = t.contains("Debug");
                    } else if let Some(rest) = t
                        .strip_prefix("pub struct ")
                        .or(t.strip_prefix("struct "))
                        .or(t.strip_prefix("pub(crate) struct "))
                    {
                        in_struct = derive_debug.then(|| {
                            rest.split([' ', '{', '<', '('])
                                .next()
                                .unwrap_or("")
                                .to_string()
                        });
                        derive_debug = false;
                    } else if t == "}" {
                        in_struct = None;
                    } else if let Some(name) = &in_struct {
                        let holds = t.contains("runtime_id")
                            && (t.contains(": String") || t.contains(": Option<String>"));
                        if holds {
                            offenders.push(format!("{}: {name}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "derive(Debug) on a runtime_id holder: {offenders:?}"
        );
    }

    #[test]
    fn runtime_id_is_absent_not_null() {
        let r = RunResponse {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: 0,
            success: true,
            duration_ms: 1,
            result: Value::Null,
            runtime_id: None,
            session: None,
            output: None,
        };
        assert!(serde_json::to_value(&r)
            .unwrap()
            .get("runtime_id")
            .is_none());
        assert!(
            serde_json::to_value(&r).unwrap().get("session").is_none(),
            "a run outside a session says nothing of one"
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap().get("result"),
            Some(&Value::Null),
            "a null result is present"
        );
    }
}
