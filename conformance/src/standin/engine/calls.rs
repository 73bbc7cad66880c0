//! Calls the engine makes itself (auth, registration hooks, middleware): sent
//! to the function's owner without a caller, answered through `engine_calls`.

use super::*;

/// Why an engine-originated call produced no result: the callee's error
/// body as the engine decodes it (`code`, `message`, `stacktrace`), or the
/// engine's own reason (the function is missing, its worker left).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct CallError {
    pub(super) code: String,
    pub(super) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stacktrace: Option<String>,
}

impl CallError {
    pub(super) fn new(code: &str, message: String) -> CallError {
        CallError {
            code: code.to_string(),
            message,
            stacktrace: None,
        }
    }

    /// A callee's `error` field, read the way the engine's `ErrorBody` reads it.
    fn from_body(e: &Value) -> CallError {
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        CallError {
            code: text("code"),
            message: text("message"),
            stacktrace: e
                .get("stacktrace")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// One engine-originated call.
pub(super) struct CallSpec<'a> {
    /// Where the function is resolved (hooks and auth: `default`).
    pub(super) namespace: &'a str,
    pub(super) function_id: &'a str,
    pub(super) data: Value,
    /// Forwarded as the invocation's `metadata` sidecar.
    pub(super) metadata: Option<Value>,
    /// Given up (as a `timeout` error) after this long.
    pub(super) within: Duration,
}

/// Calls `function_id` in `default` as the engine itself (no caller worker)
/// and waits for its answer, up to [`ENGINE_CALL_TIMEOUT`]: the auth
/// function's and the registration hooks' path.
pub(super) async fn engine_call(
    state: &Shared,
    function_id: &str,
    data: Value,
) -> Result<Value, CallError> {
    engine_call_with(
        state,
        CallSpec {
            namespace: DEFAULT_NAMESPACE,
            function_id,
            data,
            metadata: None,
            within: ENGINE_CALL_TIMEOUT,
        },
    )
    .await
}

/// [`engine_call`] with every knob. A missing function answers the engine's
/// internal `function_not_found` (its message has no final period, unlike
/// the one a worker's own call gets).
pub(super) async fn engine_call_with(
    state: &Shared,
    spec: CallSpec<'_>,
) -> Result<Value, CallError> {
    let CallSpec {
        namespace,
        function_id,
        data,
        metadata,
        within,
    } = spec;
    let invocation_id = Uuid::new_v4().to_string();
    let (tx, rx) = oneshot::channel();
    {
        let mut st = lock(state);
        let Some(callee) = st
            .functions
            .get(&(namespace.to_string(), function_id.to_string()))
            .map(|f| f.owner)
        else {
            return Err(CallError::new(
                "function_not_found",
                format!("Function {function_id} not found in namespace {namespace}"),
            ));
        };
        let local = st
            .workers
            .get(&callee)
            .and_then(|w| w.session.as_ref())
            .map(|s| s.local_id(function_id).to_string())
            .unwrap_or_else(|| function_id.to_string());
        st.engine_calls
            .insert(invocation_id.clone(), EngineCall { callee, answer: tx });
        let frame = encode(&ForwardFrame {
            r#type: "invokefunction",
            invocation_id: Some(&invocation_id),
            function_id: &local,
            data: &data,
            metadata: metadata.as_ref(),
            traceparent: None,
            baggage: None,
        });
        send(&st, callee, frame);
    }
    match tokio::time::timeout(within, rx).await {
        Ok(Ok(answer)) => answer,
        _ => {
            lock(state).engine_calls.remove(&invocation_id);
            Err(CallError::new(
                "timeout",
                format!("{function_id} did not answer"),
            ))
        }
    }
}

/// Hands an `invocationresult` to the engine call it answers; false when it
/// answers none (it is then a relayed call's result).
pub(super) fn answer_engine_call(st: &mut State, msg: &Map<String, Value>) -> bool {
    let Some(call) = str_field(msg, "invocation_id").and_then(|inv| st.engine_calls.remove(inv))
    else {
        return false;
    };
    let answer = match msg.get("error").filter(|e| !e.is_null()) {
        Some(e) => Err(CallError::from_body(e)),
        None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
    };
    let _ = call.answer.send(answer);
    true
}

/// Ends the engine calls `gone` was serving as `invocation_stopped`, as the
/// engine halts a departed worker's invocations.
pub(super) fn stop_engine_calls(st: &mut State, gone: Uuid) {
    let stopped: Vec<String> = st
        .engine_calls
        .iter()
        .filter(|(_, c)| c.callee == gone)
        .map(|(inv, _)| inv.clone())
        .collect();
    for inv in stopped {
        if let Some(call) = st.engine_calls.remove(&inv) {
            let _ = call.answer.send(Err(CallError::new(
                "invocation_stopped",
                "Invocation stopped".into(),
            )));
        }
    }
}
