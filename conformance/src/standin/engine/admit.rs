//! What an RBAC session lets through of its registrations: functions,
//! trigger bindings and trigger types, each past its listener's hook.
//!
//! Every refusal but one is silent, as on engine 0.23.0-rc.4: the frame is
//! dropped and the connection hears nothing. The exception is a binding whose
//! (mapped, prefixed) target the session may not call: it is answered with a
//! `FORBIDDEN` `triggerregistrationresult`. A hook is called as the engine,
//! in `default`, one frame at a time: the connection's later frames wait.
//!
//! Not modelled: the engine buffers every registration (triggers and trigger
//! types too) of a connection that has not named itself yet, and calls the
//! hooks only when it drains them; here hooks run as the frame arrives and
//! only function registrations wait for the name (see `NAME_GRACE`).

use super::*;

/// A hook's answer: its fields when it returned an object, `None` (refused)
/// when it threw or returned anything else.
async fn ask_hook(state: &Shared, hook: &str, input: Value) -> Option<Map<String, Value>> {
    match engine_call(state, hook, input).await {
        Ok(Value::Object(mapped)) => Some(mapped),
        other => {
            tracing::debug!(
                hook,
                answered = other.is_ok(),
                "registration denied by hook"
            );
            None
        }
    }
}

/// Applies an RBAC session to one `registerfunction`: refused when the
/// session may not register, or the hook throws or answers no object; the
/// hook may map the id, description and metadata; the prefix comes last.
pub(super) async fn admit_registration(
    state: &Shared,
    session: &Session,
    msg: &mut Map<String, Value>,
) -> bool {
    if !session.auth.allow_function_registration {
        return false;
    }
    let Some(id) = str_field(msg, "id").map(str::to_string) else {
        return false;
    };
    let mut id = id;
    if let Some(hook) = &session.rbac().on_function_registration_function_id {
        let input = json!({
            "function_id": id,
            "description": msg.get("description"),
            "metadata": msg.get("metadata"),
            "namespace": DEFAULT_NAMESPACE,
            "context": session.context(),
        });
        let Some(mapped) = ask_hook(state, hook, input).await else {
            return false;
        };
        if let Some(s) = mapped.get("function_id").and_then(Value::as_str) {
            id = s.to_string();
        }
        for key in ["description", "metadata"] {
            if let Some(v) = mapped.get(key) {
                msg.insert(key.into(), v.clone());
            }
        }
    }
    msg.insert("id".into(), Value::String(session.registered_id(&id)));
    true
}

/// Applies an RBAC session to one `registertrigger`, in the engine's order:
/// a blank `namespace` is left to the `INVALID_NAMESPACE` answer; a type
/// outside `allowed_trigger_types` is dropped; the hook may map the id,
/// type, target and config (or drop the binding); the prefix goes on the
/// target; a target the session may not call is answered `FORBIDDEN`.
pub(super) async fn admit_trigger(
    state: &Shared,
    session: &Session,
    from: Uuid,
    msg: &mut Map<String, Value>,
) -> bool {
    let namespace = msg.get("namespace").and_then(Value::as_str);
    if namespace.is_some_and(|ns| ns.trim().is_empty()) {
        return true;
    }
    let namespace = namespace.unwrap_or(DEFAULT_NAMESPACE).to_string();
    let (Some(id), Some(trigger_type), Some(function_id)) = (
        str_field(msg, "id"),
        str_field(msg, "trigger_type"),
        str_field(msg, "function_id"),
    ) else {
        return false;
    };
    let (mut id, mut trigger_type, mut function_id) = (
        id.to_string(),
        trigger_type.to_string(),
        function_id.to_string(),
    );
    if !session.may_bind(&trigger_type) {
        tracing::debug!(%trigger_type, "trigger type not allowed for this session");
        return false;
    }
    let hook = session
        .rbac()
        .on_trigger_registration_function_id
        .as_ref()
        .filter(|hook| {
            !session.hooks_when_published() || super::middleware::is_published(&lock(state), hook)
        });
    if let Some(hook) = hook {
        let input = json!({
            "trigger_id": id,
            "trigger_type": trigger_type,
            "function_id": function_id,
            "config": msg.get("config").cloned().unwrap_or(Value::Null),
            "metadata": msg.get("metadata").cloned().unwrap_or(Value::Null),
            "namespace": namespace,
            "context": session.context(),
        });
        let Some(mapped) = ask_hook(state, hook, input).await else {
            return false;
        };
        for (key, field) in [
            ("trigger_id", &mut id),
            ("trigger_type", &mut trigger_type),
            ("function_id", &mut function_id),
        ] {
            if let Some(s) = mapped.get(key).and_then(Value::as_str) {
                *field = s.to_string();
            }
        }
        if let Some(config) = mapped.get("config") {
            msg.insert("config".into(), config.clone());
        }
    }
    let function_id = session.registered_id(&function_id);
    if !may_target(
        state,
        session,
        from,
        [&id, &trigger_type, &function_id],
        &namespace,
    ) {
        return false;
    }
    msg.insert("id".into(), Value::String(id));
    msg.insert("trigger_type".into(), Value::String(trigger_type));
    msg.insert("function_id".into(), Value::String(function_id));
    true
}

/// Whether the session may bind a trigger to `function_id` in `namespace`:
/// the target is gated as a call to it would be. A refusal is answered.
fn may_target(
    state: &Shared,
    session: &Session,
    from: Uuid,
    [id, trigger_type, function_id]: [&str; 3],
    namespace: &str,
) -> bool {
    let st = lock(state);
    let metadata = st
        .functions
        .get(&(namespace.to_string(), function_id.to_string()))
        .and_then(|f| f.metadata.as_ref());
    if session.decide(function_id, metadata).is_ok() {
        return true;
    }
    let frame = json!({
        "id": id,
        "trigger_type": trigger_type,
        "function_id": function_id,
        "error": {
            "code": "FORBIDDEN",
            "message": format!("function '{function_id}' not allowed in namespace '{namespace}'"),
        },
    });
    send(&st, from, ordered_trigger_result(frame));
    false
}

/// Applies an RBAC session to one `registertriggertype`: refused unless the
/// session has `allow_trigger_type_registration`; the hook may map the id
/// and description (or drop the type).
pub(super) async fn admit_trigger_type(
    state: &Shared,
    session: &Session,
    msg: &mut Map<String, Value>,
) -> bool {
    if !session.auth.allow_trigger_type_registration {
        tracing::debug!("trigger type registration not allowed for this session");
        return false;
    }
    let Some(id) = str_field(msg, "id").map(str::to_string) else {
        return false;
    };
    if let Some(hook) = &session.rbac().on_trigger_type_registration_function_id {
        let input = json!({
            "trigger_type_id": id,
            "description": str_field(msg, "description").unwrap_or(""),
            "context": session.context(),
        });
        let Some(mapped) = ask_hook(state, hook, input).await else {
            return false;
        };
        for (key, field) in [("trigger_type_id", "id"), ("description", "description")] {
            if let Some(s) = mapped.get(key).and_then(Value::as_str) {
                msg.insert(field.into(), Value::String(s.to_string()));
            }
        }
    }
    true
}
