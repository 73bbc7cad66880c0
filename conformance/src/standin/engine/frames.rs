//! The outbound frames, in the field order the real engine writes them.

use super::*;

// ---- outbound frames, in the field order the real engine writes them ----

#[derive(Serialize)]
pub(super) struct WorkerRegisteredFrame<'a> {
    pub(super) r#type: &'static str,
    pub(super) worker_id: &'a str,
    pub(super) reattach_token: &'a str,
}

#[derive(Serialize)]
pub(super) struct ResultFrame<'a> {
    pub(super) r#type: &'static str,
    pub(super) invocation_id: &'a str,
    pub(super) function_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<ErrorBody<'a>>,
}

#[derive(Serialize)]
pub(super) struct ErrorBody<'a> {
    pub(super) code: &'a str,
    pub(super) message: &'a str,
}

/// A callee's `invocationresult` as relayed to the caller. The engine decodes
/// the callee's frame and writes a fresh one, so the caller sees the engine's
/// field order (`type`, `invocation_id`, `function_id`, then `result` or
/// `error`), whatever order the callee's SDK used; the values themselves,
/// a handler's error body included, pass through unchanged.
#[derive(Serialize)]
pub(super) struct RelayedResultFrame<'a> {
    pub(super) r#type: &'static str,
    pub(super) invocation_id: &'a str,
    pub(super) function_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) baggage: Option<&'a Value>,
}

#[derive(Serialize)]
pub(super) struct ForwardFrame<'a> {
    pub(super) r#type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) invocation_id: Option<&'a str>,
    pub(super) function_id: &'a str,
    pub(super) data: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) metadata: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) baggage: Option<&'a Value>,
}

#[derive(Serialize)]
pub(super) struct BindFrame<'a> {
    pub(super) r#type: &'static str,
    pub(super) id: &'a str,
    pub(super) trigger_type: &'a str,
    pub(super) function_id: &'a str,
    pub(super) config: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) metadata: Option<&'a Value>,
}

#[derive(Serialize)]
pub(super) struct UnbindFrame<'a> {
    pub(super) r#type: &'static str,
    pub(super) id: &'a str,
    pub(super) trigger_type: &'a str,
}

pub(super) fn encode<T: Serialize>(frame: &T) -> String {
    serde_json::to_string(frame).expect("engine frames always serialize")
}

pub(super) fn error_frame(
    invocation_id: &str,
    function_id: &str,
    code: &str,
    message: &str,
) -> String {
    encode(&ResultFrame {
        r#type: "invocationresult",
        invocation_id,
        function_id,
        result: None,
        error: Some(ErrorBody { code, message }),
    })
}

pub(super) fn result_frame(invocation_id: &str, function_id: &str, result: &Value) -> String {
    encode(&ResultFrame {
        r#type: "invocationresult",
        invocation_id,
        function_id,
        result: Some(result),
        error: None,
    })
}

pub(super) fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
