//! What a worker's frames do to the engine's state: registrations,
//! trigger bindings, publication, held frames and disconnects.

use super::*;

pub(super) fn send(st: &State, to: Uuid, frame: String) {
    if let Some(w) = st.workers.get(&to) {
        let _ = w.tx.send(Outbound::Frame(frame));
    }
}

/// Sends a bind/unbind frame to the worker that declared `trigger_type`, if a
/// worker did (the engine's own types need no frame).
pub(super) fn send_to_provider(st: &State, trigger_type: &str, frame: String) {
    if let Some(owner) = st.trigger_types.get(trigger_type).and_then(|t| t.owner) {
        send(st, owner, frame);
    }
}

pub(super) fn str_field<'a>(msg: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    msg.get(key).and_then(Value::as_str)
}

pub(super) fn handle_frame(state: &Shared, from: Uuid, msg: Map<String, Value>) {
    let Some(kind) = str_field(&msg, "type") else {
        return;
    };
    let mut st = lock(state);
    match kind {
        "registerfunction" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            let f = Function {
                id: id.to_string(),
                owner: from,
                description: str_field(&msg, "description").map(str::to_string),
                request_format: msg.get("request_format").cloned(),
                response_format: msg.get("response_format").cloned(),
                metadata: msg.get("metadata").cloned(),
            };
            let named = st.workers.get(&from).map(|w| w.named).unwrap_or(false);
            if named {
                publish(&mut st, f);
            } else if let Some(w) = st.workers.get_mut(&from) {
                w.held.retain(|h| h.id != f.id);
                w.held.push(f);
            }
        }
        "unregisterfunction" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            let prefixed = st
                .workers
                .get(&from)
                .and_then(|w| w.session.as_ref())
                .map(|s| s.registered_id(id));
            let id = prefixed.as_deref().unwrap_or(id);
            let ns = worker_namespace(&st, from);
            let key = (ns, id.to_string());
            if st.functions.get(&key).map(|f| f.owner) == Some(from) {
                st.functions.remove(&key);
            }
            if let Some(w) = st.workers.get_mut(&from) {
                w.held.retain(|h| h.id != id);
            }
        }
        "invokefunction" => {
            if let Some(call) = invoke(&mut st, from, msg) {
                // The middleware may take its time; this connection's later
                // frames are not held up by it.
                tokio::spawn(run_middleware(state.clone(), call));
            }
        }
        "invocationresult" => {
            if answer_engine_call(&mut st, &msg) {
                return;
            }
            let Some(inv) = str_field(&msg, "invocation_id") else {
                return;
            };
            if let Some(p) = st.pending.get(inv) {
                if p.callee != from {
                    return;
                }
            }
            if let Some(p) = st.pending.remove(inv) {
                // Passed through unchanged, the handler's error body included,
                // in the engine's field order.
                let frame = encode(&RelayedResultFrame {
                    r#type: "invocationresult",
                    invocation_id: inv,
                    function_id: &p.function_id,
                    result: msg.get("result"),
                    error: msg.get("error"),
                    traceparent: msg.get("traceparent"),
                    baggage: msg.get("baggage"),
                });
                let answer_bytes = frame.len();
                send(&st, p.caller, frame);
                if st.relays.len() == RELAYS_KEPT {
                    st.relays.pop_front();
                }
                st.relays.push_back(Relay {
                    function_id: p.function_id,
                    forwarded_at: p.forwarded_at,
                    answered_at: std::time::Instant::now(),
                    request_bytes: p.request_bytes,
                    answer_bytes,
                });
            }
        }
        "registertriggertype" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            st.trigger_types.insert(
                id.to_string(),
                TriggerType {
                    owner: Some(from),
                    description: str_field(&msg, "description").unwrap_or("").to_string(),
                },
            );
            // Bindings that waited for this type are handed to its provider now.
            let waiting: Vec<Binding> = st
                .triggers
                .values()
                .filter(|b| b.trigger_type == id)
                .cloned()
                .collect();
            for b in waiting {
                send(&st, from, bind_frame(&b));
            }
        }
        "unregistertriggertype" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            if st.trigger_types.get(id).and_then(|t| t.owner) == Some(from) {
                st.trigger_types.remove(id);
            }
        }
        "registertrigger" => register_trigger(&mut st, from, &msg),
        "unregistertrigger" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            if let Some(b) = st.triggers.remove(id) {
                send_to_provider(&st, &b.trigger_type, unbind_frame(&b));
            }
        }
        "ping" => send(&st, from, r#"{"type":"pong"}"#.to_string()),
        // A reconnecting SDK retires its previous connection; that one is
        // already gone here (its socket closed), so there is nothing to do.
        "reattach" => {}
        _ => tracing::debug!(kind, "ignoring an unknown frame type"),
    }
}

pub(super) fn bind_frame(b: &Binding) -> String {
    encode(&BindFrame {
        r#type: "registertrigger",
        id: &b.id,
        trigger_type: &b.trigger_type,
        function_id: &b.function_id,
        config: &b.config,
        metadata: b.metadata.as_ref(),
    })
}

pub(super) fn unbind_frame(b: &Binding) -> String {
    encode(&UnbindFrame {
        r#type: "unregistertrigger",
        id: &b.id,
        trigger_type: &b.trigger_type,
    })
}

pub(super) fn register_trigger(st: &mut State, from: Uuid, msg: &Map<String, Value>) {
    let (Some(id), Some(trigger_type), Some(function_id)) = (
        str_field(msg, "id"),
        str_field(msg, "trigger_type"),
        str_field(msg, "function_id"),
    ) else {
        return;
    };
    if let Some(ns) = msg.get("namespace").and_then(Value::as_str) {
        if ns.trim().is_empty() {
            let frame = json!({
                "type": "triggerregistrationresult",
                "id": id,
                "trigger_type": trigger_type,
                "function_id": function_id,
                "error": {
                    "code": "INVALID_NAMESPACE",
                    "message": "`namespace` is empty: it was named and left blank. Give it a name, or omit it to use `default`."
                }
            });
            send(st, from, ordered_trigger_result(frame));
            return;
        }
    }
    let b = Binding {
        id: id.to_string(),
        trigger_type: trigger_type.to_string(),
        function_id: function_id.to_string(),
        config: msg.get("config").cloned().unwrap_or_else(|| json!({})),
        metadata: msg.get("metadata").filter(|m| !m.is_null()).cloned(),
        owner: from,
    };
    send_to_provider(st, trigger_type, bind_frame(&b));
    // Unknown types leave the binding pending, silently, as the engine does.
    st.triggers.insert(b.id.clone(), b);
}

/// `triggerregistrationresult` in the engine's field order.
pub(super) fn ordered_trigger_result(v: Value) -> String {
    #[derive(Serialize)]
    struct F<'a> {
        r#type: &'a str,
        id: &'a Value,
        trigger_type: &'a Value,
        function_id: &'a Value,
        error: &'a Value,
    }
    encode(&F {
        r#type: "triggerregistrationresult",
        id: &v["id"],
        trigger_type: &v["trigger_type"],
        function_id: &v["function_id"],
        error: &v["error"],
    })
}

pub(super) fn worker_namespace(st: &State, id: Uuid) -> String {
    st.workers
        .get(&id)
        .map(|w| w.namespace.clone())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

/// Makes a function visible, unless another live worker owns its id.
pub(super) fn publish(st: &mut State, f: Function) {
    let ns = worker_namespace(st, f.owner);
    let key = (ns.clone(), f.id.clone());
    if let Some(existing) = st.functions.get(&key) {
        if existing.owner != f.owner {
            let frame = json!({
                "type": "registrationrejected",
                "code": "FUNCTION_NAMESPACE_CONFLICT",
                "namespace": ns,
                "function_id": f.id,
                "owner_worker_id": existing.owner.to_string(),
            });
            send(st, f.owner, ordered_rejection(&frame));
            return;
        }
    }
    st.functions.insert(key, f);
}

/// `registrationrejected` in the engine's field order.
pub(super) fn ordered_rejection(v: &Value) -> String {
    #[derive(Serialize)]
    struct F<'a> {
        r#type: &'a str,
        code: &'a Value,
        namespace: &'a Value,
        #[serde(skip_serializing_if = "Value::is_null")]
        worker_name: &'a Value,
        #[serde(skip_serializing_if = "Value::is_null")]
        function_id: &'a Value,
        owner_worker_id: &'a Value,
    }
    encode(&F {
        r#type: "registrationrejected",
        code: &v["code"],
        namespace: &v["namespace"],
        worker_name: &v["worker_name"],
        function_id: &v["function_id"],
        owner_worker_id: &v["owner_worker_id"],
    })
}

pub(super) fn flush_held(st: &mut State, worker: Uuid) {
    let held = match st.workers.get_mut(&worker) {
        Some(w) => {
            w.named = true;
            std::mem::take(&mut w.held)
        }
        None => return,
    };
    for f in held {
        publish(st, f);
    }
}

pub(super) fn disconnect(state: &Shared, gone: Uuid) {
    let mut st = lock(state);
    st.workers.remove(&gone);
    st.functions.retain(|_, f| f.owner != gone);
    stop_engine_calls(&mut st, gone);
    // Calls the departed worker was serving end as `invocation_stopped`;
    // calls it was waiting on are dropped.
    let stopped: Vec<(String, PendingCall)> = st
        .pending
        .iter()
        .filter(|(_, p)| p.callee == gone || p.caller == gone)
        .map(|(k, p)| {
            (
                k.clone(),
                PendingCall {
                    caller: p.caller,
                    callee: p.callee,
                    function_id: p.function_id.clone(),
                    forwarded_at: p.forwarded_at,
                    request_bytes: p.request_bytes,
                },
            )
        })
        .collect();
    for (inv, p) in stopped {
        st.pending.remove(&inv);
        if p.callee == gone && p.caller != gone {
            let frame = error_frame(
                &inv,
                &p.function_id,
                "invocation_stopped",
                "Invocation stopped",
            );
            send(&st, p.caller, frame);
        }
    }
    let owned_types: Vec<String> = st
        .trigger_types
        .iter()
        .filter(|(_, t)| t.owner == Some(gone))
        .map(|(k, _)| k.clone())
        .collect();
    for t in owned_types {
        st.trigger_types.remove(&t);
    }
    let bindings: Vec<Binding> = st
        .triggers
        .values()
        .filter(|b| b.owner == gone)
        .cloned()
        .collect();
    for b in bindings {
        st.triggers.remove(&b.id);
        send_to_provider(&st, &b.trigger_type, unbind_frame(&b));
    }
}
