//! A listener's `middleware_function_id`: calls through that listener that
//! RBAC allows go to the middleware instead of their target, and the
//! middleware's answer is the caller's result.
//!
//! As on engine 0.23.0-rc.4: the engine's own `engine::*` builtins bypass it
//! (a worker-registered `engine::*` id does not); the middleware is called as
//! the engine (no `_caller_worker_id`), in the call's namespace, with the
//! call's `metadata`, and receives
//! `{"function_id", "payload", "action", "context", "namespace"}`; its result,
//! or its error body, goes back to the caller under the caller's invocation id
//! (a fresh one when the call had none: the engine answers even a void call
//! that went through a middleware), with the caller's `traceparent` and
//! `baggage`. The call runs on its own task, so the caller's later frames are
//! not held up by it.

use super::*;

/// A call a middleware takes instead of its target.
pub(super) struct MiddlewareCall {
    caller: Uuid,
    middleware_id: String,
    /// What the caller asked for.
    function_id: String,
    /// The caller's id, or a fresh one for a call that had none.
    invocation_id: String,
    namespace: String,
    input: Value,
    metadata: Option<Value>,
    traceparent: Option<Value>,
    baggage: Option<Value>,
}

/// Whether `function_id` is one of the engine's own builtins: an `engine::`
/// id no worker registered in `namespace`.
pub(super) fn is_engine_owned_builtin(st: &State, namespace: &str, function_id: &str) -> bool {
    function_id.starts_with("engine::")
        && !st
            .functions
            .contains_key(&(namespace.to_string(), function_id.to_string()))
}

/// Whether a worker registered `function_id` in the default namespace.
pub(super) fn is_published(st: &State, function_id: &str) -> bool {
    st.functions
        .contains_key(&(DEFAULT_NAMESPACE.to_string(), function_id.to_string()))
}

/// The action as the engine re-encodes it: `{"type":"void"}`,
/// `{"type":"enqueue","queue":…}`, or `null` when the call had none.
fn action_value(msg: &Map<String, Value>) -> Value {
    let action = msg.get("action");
    match action.and_then(|a| a.get("type")).and_then(Value::as_str) {
        Some("void") => json!({"type": "void"}),
        Some("enqueue") => json!({
            "type": "enqueue",
            "queue": action.and_then(|a| a.get("queue")).cloned().unwrap_or(Value::Null),
        }),
        _ => Value::Null,
    }
}

/// The middleware call that replaces `msg`, when the caller's listener has
/// a middleware and the target is not an engine builtin. Call only once the
/// RBAC decision allowed the call.
pub(super) fn intercept(
    st: &State,
    session: &Session,
    from: Uuid,
    msg: &Map<String, Value>,
) -> Option<MiddlewareCall> {
    let middleware_id = session.middleware()?;
    let function_id = str_field(msg, "function_id")?;
    let namespace = str_field(msg, "namespace").unwrap_or(DEFAULT_NAMESPACE);
    if is_engine_owned_builtin(st, namespace, function_id) {
        return None;
    }
    if session.hooks_when_published() && !is_published(st, middleware_id) {
        return None;
    }
    let input = json!({
        "function_id": function_id,
        "payload": msg.get("data").cloned().unwrap_or(Value::Null),
        "action": action_value(msg),
        "context": session.context(),
        "namespace": namespace,
    });
    Some(MiddlewareCall {
        caller: from,
        middleware_id: middleware_id.to_string(),
        function_id: function_id.to_string(),
        invocation_id: str_field(msg, "invocation_id")
            .map(str::to_string)
            .unwrap_or_else(|| Uuid::new_v4().to_string()),
        namespace: namespace.to_string(),
        input,
        metadata: msg.get("metadata").filter(|m| !m.is_null()).cloned(),
        traceparent: msg.get("traceparent").filter(|t| !t.is_null()).cloned(),
        baggage: msg.get("baggage").filter(|b| !b.is_null()).cloned(),
    })
}

/// Calls the middleware and answers the caller with what it returned.
pub(super) async fn run_middleware(state: Shared, call: MiddlewareCall) {
    let answer = engine_call_with(
        &state,
        CallSpec {
            namespace: &call.namespace,
            function_id: &call.middleware_id,
            data: call.input,
            metadata: call.metadata,
            within: MIDDLEWARE_CALL_TIMEOUT,
        },
    )
    .await;
    let (result, error) = match &answer {
        // A `null` result is no result: the field is left out.
        Ok(v) => ((!v.is_null()).then_some(v), None),
        Err(e) => (None, Some(e)),
    };
    let frame = encode(&MiddlewareResultFrame {
        r#type: "invocationresult",
        invocation_id: &call.invocation_id,
        function_id: &call.function_id,
        result,
        error,
        traceparent: call.traceparent.as_ref(),
        baggage: call.baggage.as_ref(),
    });
    send(&lock(&state), call.caller, frame);
}

/// The caller's `invocationresult` for a call a middleware took, in the
/// engine's field order.
#[derive(Serialize)]
struct MiddlewareResultFrame<'a> {
    r#type: &'static str,
    invocation_id: &'a str,
    function_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a CallError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baggage: Option<&'a Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn actions_are_re_encoded_and_absent_is_null() {
        assert_eq!(action_value(&msg(json!({}))), Value::Null);
        assert_eq!(
            action_value(&msg(json!({"action": {"type": "void", "extra": 1}}))),
            json!({"type": "void"})
        );
        assert_eq!(
            action_value(&msg(json!({"action": {"type": "enqueue", "queue": "q"}}))),
            json!({"type": "enqueue", "queue": "q"})
        );
    }

    #[test]
    fn only_unregistered_engine_ids_are_builtins() {
        let mut st = State::new();
        assert!(is_engine_owned_builtin(
            &st,
            "default",
            "engine::functions::list"
        ));
        assert!(!is_engine_owned_builtin(&st, "default", "state::get"));
        st.functions.insert(
            ("default".into(), "engine::x".into()),
            Function {
                id: "engine::x".into(),
                owner: Uuid::new_v4(),
                description: None,
                request_format: None,
                response_format: None,
                metadata: None,
            },
        );
        assert!(!is_engine_owned_builtin(&st, "default", "engine::x"));
        assert!(is_engine_owned_builtin(&st, "orders", "engine::x"));
    }

    fn function(id: &str) -> Function {
        Function {
            id: id.into(),
            owner: Uuid::new_v4(),
            description: None,
            request_format: None,
            response_format: None,
            metadata: None,
        }
    }

    #[test]
    fn a_when_published_middleware_applies_once_registered_and_only_then() {
        let mut st = State::new();
        let session = Session {
            listener: std::sync::Arc::new(GuestListener {
                middleware_function_id: Some("w::guest-middleware".into()),
                hooks_when_published: true,
                ..GuestListener::default()
            }),
            auth: AuthResult::open(),
        };
        let call = msg(json!({"function_id": "app::f", "data": {}}));
        assert!(
            intercept(&st, &session, Uuid::new_v4(), &call).is_none(),
            "no worker publishes the middleware: the call goes to its target"
        );
        st.functions.insert(
            ("default".into(), "w::guest-middleware".into()),
            function("w::guest-middleware"),
        );
        let taken = intercept(&st, &session, Uuid::new_v4(), &call)
            .expect("the published middleware takes the call");
        assert_eq!(taken.middleware_id, "w::guest-middleware");
    }
}
