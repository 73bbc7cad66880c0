//! Invocation: routing a call to its owner, to a built-in or to its
//! listener's middleware, and relaying the result back to the caller.

use super::*;

// ---- invocation ----

/// Routes one `invokefunction`. A call its listener's middleware takes
/// instead is returned, for the caller to run on a task of its own.
#[must_use]
pub(super) fn invoke(
    st: &mut State,
    from: Uuid,
    msg: Map<String, Value>,
) -> Option<MiddlewareCall> {
    let function_id = str_field(&msg, "function_id")?.to_string();
    let invocation_id = str_field(&msg, "invocation_id").map(str::to_string);
    let action = msg
        .get("action")
        .and_then(|a| a.get("type"))
        .and_then(Value::as_str);
    let data = msg.get("data").cloned().unwrap_or(Value::Null);
    let namespace = str_field(&msg, "namespace")
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_string();

    // An RBAC connection's calls, the engine's own functions included, pass
    // its decision first; a denial answers even a void call.
    if let Some(session) = st.workers.get(&from).and_then(|w| w.session.clone()) {
        let metadata = st
            .functions
            .get(&(namespace.clone(), function_id.clone()))
            .and_then(|f| f.metadata.clone());
        if let Err(message) = session.decide(&function_id, metadata.as_ref()) {
            let inv = invocation_id
                .clone()
                .unwrap_or_else(|| Uuid::new_v4().to_string());
            send(
                st,
                from,
                error_frame(&inv, &function_id, "FORBIDDEN", &message),
            );
            return None;
        }
        // Only an allowed call reaches the middleware.
        if let Some(call) = intercept(st, &session, from, &msg) {
            return Some(call);
        }
    }

    // A worker may register an `engine::` id of its own; that one is routed
    // to it like any other function.
    if is_engine_owned_builtin(st, &namespace, &function_id) {
        let answer = builtin(st, from, &function_id, &data);
        if let (Some(inv), Some(answer)) = (invocation_id.as_deref(), answer) {
            let frame = match answer {
                Ok(v) => result_frame(inv, &function_id, &v),
                Err((code, message)) => error_frame(inv, &function_id, code, &message),
            };
            send(st, from, frame);
        }
        return None;
    }

    if action == Some("enqueue") {
        if let Some(inv) = invocation_id.as_deref() {
            let message = format!(
                "No queue provider is installed. `TriggerAction::Enqueue` routes through the `engine::queue::enqueue` provider, which the standalone queue worker registers. Add it with `iii worker add queue`. (underlying: Function engine::queue::enqueue not found in namespace {DEFAULT_NAMESPACE})"
            );
            send(
                st,
                from,
                error_frame(inv, &function_id, "enqueue_error", &message),
            );
        }
        return None;
    }

    let key = (namespace.clone(), function_id.clone());
    let Some(callee) = st.functions.get(&key).map(|f| f.owner) else {
        if let Some(inv) = invocation_id.as_deref() {
            let mut elsewhere: Vec<String> = st
                .functions
                .keys()
                .filter(|(ns, id)| id == &function_id && ns != &namespace)
                .map(|(ns, _)| ns.clone())
                .collect();
            elsewhere.sort();
            let mut message = format!("Function {function_id} not found in namespace {namespace}.");
            if !elsewhere.is_empty() {
                message.push_str(&format!(
                    " It is registered in namespace(s): {}.",
                    elsewhere.join(", ")
                ));
            }
            send(
                st,
                from,
                error_frame(inv, &function_id, "function_not_found", &message),
            );
        }
        return None;
    };

    // The engine tells the handler who called by adding `_caller_worker_id`
    // to object payloads; other payloads pass untouched.
    let data = match data {
        Value::Object(mut m) => {
            m.insert("_caller_worker_id".into(), Value::String(from.to_string()));
            Value::Object(m)
        }
        other => other,
    };
    let void = action == Some("void") || invocation_id.is_none();
    // A prefixed registration is reached by its bus id; its SDK knows it
    // without the prefix.
    let local_id = st
        .workers
        .get(&callee)
        .and_then(|w| w.session.as_ref())
        .map(|s| s.local_id(&function_id).to_string())
        .unwrap_or_else(|| function_id.clone());
    let frame = encode(&ForwardFrame {
        r#type: "invokefunction",
        invocation_id: if void { None } else { invocation_id.as_deref() },
        function_id: &local_id,
        data: &data,
        metadata: msg.get("metadata"),
        traceparent: msg.get("traceparent"),
        baggage: msg.get("baggage"),
    });
    if !void {
        if let Some(inv) = invocation_id {
            st.pending.insert(
                inv,
                PendingCall {
                    caller: from,
                    callee,
                    function_id: function_id.clone(),
                    forwarded_at: std::time::Instant::now(),
                    request_bytes: frame.len(),
                },
            );
        }
    }
    send(st, callee, frame);
    None
}
