//! The built-in `engine::*` functions: listings, info, worker names and
//! channel creation.

use super::*;

pub(super) type BuiltinAnswer = Option<Result<Value, (&'static str, String)>>;

pub(super) fn builtin(
    st: &mut State,
    from: Uuid,
    function_id: &str,
    data: &Value,
) -> BuiltinAnswer {
    match function_id {
        "engine::workers::register" => {
            register_worker_name(st, from, data);
            Some(Ok(Value::Null))
        }
        "engine::functions::list" => {
            let mut listed = functions_list(st, data);
            if let Some(session) = session_of(st, from) {
                visible_only(st, &session, &mut listed);
            }
            Some(Ok(listed))
        }
        "engine::functions::info" => Some(match session_of(st, from) {
            Some(session) => functions_info_for(st, &session, data),
            None => functions_info(st, data),
        }),
        "engine::workers::list" => Some(Ok(workers_list(st))),
        "engine::channels::create" => Some(st.channels.create(data)),
        "engine::triggers::list" => Some(Ok(triggers_list(st, data))),
        "engine::registered-triggers::list" => Some(Ok(registered_triggers_list(st, data))),
        other => Some(Err((
            "function_not_found",
            format!("Function {other} not found in namespace {DEFAULT_NAMESPACE}."),
        ))),
    }
}

/// The RBAC session of the connection `from`, if it came through such a
/// listener.
fn session_of(st: &State, from: Uuid) -> Option<std::sync::Arc<Session>> {
    st.workers.get(&from).and_then(|w| w.session.clone())
}

/// Whether `session` may call `function_id`: what the engine's listings
/// show such a connection (0.23.0-rc.4 filters `functions::list` and
/// `functions::info` through the caller's RBAC session).
fn visible(st: &State, session: &Session, function_id: &str) -> bool {
    let metadata = st
        .functions
        .get(&(DEFAULT_NAMESPACE.to_string(), function_id.to_string()))
        .and_then(|f| f.metadata.as_ref());
    session.decide(function_id, metadata).is_ok()
}

/// Drops from a `functions::list` answer what `session` may not call.
fn visible_only(st: &State, session: &Session, listed: &mut Value) {
    if let Some(fns) = listed.get_mut("functions").and_then(Value::as_array_mut) {
        fns.retain(|f| {
            f.get("function_id")
                .and_then(Value::as_str)
                .is_some_and(|id| visible(st, session, id))
        });
    }
}

/// `functions::info` for an RBAC session: an id it may not call is
/// `FORBIDDEN`, as on the engine (a batch marks it `forbidden`).
fn functions_info_for(
    st: &State,
    session: &Session,
    data: &Value,
) -> Result<Value, (&'static str, String)> {
    if let Some(id) = data.get("function_id").and_then(Value::as_str) {
        if st
            .functions
            .contains_key(&(DEFAULT_NAMESPACE.to_string(), id.to_string()))
            && !visible(st, session, id)
        {
            return Err((
                "FORBIDDEN",
                format!("Function '{id}' is not visible to this session."),
            ));
        }
    }
    let mut answer = functions_info(st, data)?;
    if let Some(fns) = answer.get_mut("functions").and_then(Value::as_array_mut) {
        for f in fns.iter_mut() {
            let id = f
                .get("function_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if f.get("error").is_none() && !visible(st, session, &id) {
                *f = json!({"function_id": id, "error": "forbidden"});
            }
        }
    }
    Ok(answer)
}

pub(super) fn include_internal(data: &Value) -> bool {
    data.get("include_internal")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The first `::` segment of `id`: the engine's `worker_name` for anything
/// whose owner it cannot name.
pub(super) fn first_segment(id: &str) -> &str {
    id.split("::").next().unwrap_or(id)
}

/// The `worker_name` the engine reports for a function: its owner's name, or
/// the id's first `::` segment when the owner never named itself (or the
/// function is not registered). Never null.
pub(super) fn worker_name_for(st: &State, owner: Option<Uuid>, function_id: &str) -> String {
    owner
        .and_then(|o| st.workers.get(&o))
        .and_then(|w| w.name.clone())
        .unwrap_or_else(|| first_segment(function_id).to_string())
}

pub(super) fn function_owner_name(st: &State, function_id: &str) -> String {
    let owner = st
        .functions
        .iter()
        .find(|((_, id), _)| id == function_id)
        .map(|(_, f)| f.owner);
    worker_name_for(st, owner, function_id)
}

/// `engine::triggers::list`: declared trigger types sorted by id, the
/// engine's own `engine::*` types hidden unless `include_internal`.
pub(super) fn triggers_list(st: &State, data: &Value) -> Value {
    let internal = include_internal(data);
    let triggers: Vec<Value> = st
        .trigger_types
        .iter()
        .filter(|(id, _)| internal || !id.starts_with("engine::"))
        .map(|(id, t)| {
            json!({
                "id": id,
                "description": t.description,
                "namespace": DEFAULT_NAMESPACE,
                "worker_name": worker_name_for(st, t.owner, id),
            })
        })
        .collect();
    json!({ "triggers": triggers })
}

/// The engine's `config_summary`: the config as compact JSON, cut after
/// this many characters (with an ellipsis).
pub(super) const CONFIG_SUMMARY_MAX_LEN: usize = 80;

pub(super) fn config_summary(config: &Value) -> String {
    let raw = serde_json::to_string(config).unwrap_or_else(|_| "{}".to_string());
    if raw.chars().count() <= CONFIG_SUMMARY_MAX_LEN {
        raw
    } else {
        let mut out: String = raw.chars().take(CONFIG_SUMMARY_MAX_LEN).collect();
        out.push('…');
        out
    }
}

/// `engine::registered-triggers::list`: live bindings sorted by id. A binding
/// whose type nobody declared is pending and not listed (transcripts/02:
/// `trg-2` of the unknown type `nope` is absent); bindings targeting
/// `engine::*` functions are hidden unless `include_internal`.
pub(super) fn registered_triggers_list(st: &State, data: &Value) -> Value {
    let internal = include_internal(data);
    let listed: Vec<Value> = st
        .triggers
        .values()
        .filter(|b| st.is_live(b))
        .filter(|b| internal || !b.function_id.starts_with("engine::"))
        .map(|b| {
            json!({
                "id": b.id,
                "trigger_type": b.trigger_type,
                "function_id": b.function_id,
                "config": b.config,
                "config_summary": config_summary(&b.config),
                "worker_name": function_owner_name(st, &b.function_id),
            })
        })
        .collect();
    json!({ "registered_triggers": listed })
}

pub(super) fn register_worker_name(st: &mut State, from: Uuid, data: &Value) {
    let name = data.get("name").and_then(Value::as_str).map(str::to_string);
    let namespace = data
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_string();
    if let Some(name) = &name {
        let owner = st
            .workers
            .iter()
            .find(|(id, w)| {
                **id != from && w.name.as_deref() == Some(name) && w.namespace == namespace
            })
            .map(|(id, _)| *id);
        if let Some(owner) = owner {
            let frame = json!({
                "code": "WORKER_NAMESPACE_CONFLICT",
                "namespace": namespace,
                "worker_name": name,
                "owner_worker_id": owner.to_string(),
            });
            send(st, from, ordered_rejection(&frame));
            if let Some(w) = st.workers.get(&from) {
                let _ = w.tx.send(Outbound::Close);
            }
            // Its held registrations are dropped with it.
            if let Some(w) = st.workers.get_mut(&from) {
                w.held.clear();
            }
            return;
        }
    }
    if let Some(w) = st.workers.get_mut(&from) {
        w.name = name;
        w.namespace = namespace;
        w.metadata = data.clone();
    }
    flush_held(st, from);
}

pub(super) fn is_internal(f: &Function) -> bool {
    f.metadata
        .as_ref()
        .and_then(|m| m.get("internal"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

pub(super) fn functions_list(st: &State, data: &Value) -> Value {
    let search = data
        .get("search")
        .and_then(Value::as_str)
        .map(str::to_lowercase);
    let prefix = data.get("prefix").and_then(Value::as_str);
    let worker = data.get("worker").and_then(Value::as_str);
    let include_internal = include_internal(data);
    let mut out: Vec<(String, Value)> = Vec::new();
    for ((ns, id), f) in &st.functions {
        if !include_internal && (id.starts_with("engine::") || is_internal(f)) {
            continue;
        }
        if prefix.is_some_and(|p| !id.starts_with(p)) {
            continue;
        }
        let worker_name = worker_name_for(st, Some(f.owner), id);
        if worker.is_some_and(|w| worker_name != w) {
            continue;
        }
        if let Some(s) = &search {
            let hay = format!("{} {}", id, f.description.as_deref().unwrap_or("")).to_lowercase();
            if !hay.contains(s.as_str()) {
                continue;
            }
        }
        let mut entry = Map::new();
        entry.insert("function_id".into(), json!(id));
        entry.insert("namespace".into(), json!(ns));
        entry.insert("worker_name".into(), json!(worker_name));
        if let Some(d) = &f.description {
            entry.insert("description".into(), json!(d));
        }
        if let Some(m) = &f.metadata {
            entry.insert("metadata".into(), m.clone());
        }
        out.push((id.clone(), Value::Object(entry)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    json!({ "functions": out.into_iter().map(|(_, v)| v).collect::<Vec<_>>() })
}

pub(super) fn info_entry(st: &State, function_id: &str) -> Option<Value> {
    let ((ns, _), f) = st.functions.iter().find(|((_, id), _)| id == function_id)?;
    let mut entry = Map::new();
    entry.insert("function_id".into(), json!(function_id));
    entry.insert("namespace".into(), json!(ns));
    entry.insert(
        "worker_name".into(),
        json!(worker_name_for(st, Some(f.owner), function_id)),
    );
    if let Some(d) = &f.description {
        entry.insert("description".into(), json!(d));
    }
    if let Some(m) = &f.metadata {
        entry.insert("metadata".into(), m.clone());
    }
    // The engine answers the registered formats under new names.
    if let Some(r) = &f.request_format {
        entry.insert("request_schema".into(), r.clone());
    }
    if let Some(r) = &f.response_format {
        entry.insert("response_schema".into(), r.clone());
    }
    let triggers: Vec<Value> = st
        .triggers
        .values()
        .filter(|b| b.function_id == function_id && st.is_live(b))
        .map(|b| json!({"id": b.id, "trigger_type": b.trigger_type, "config": b.config}))
        .collect();
    entry.insert("registered_triggers".into(), Value::Array(triggers));
    Some(Value::Object(entry))
}

pub(super) fn functions_info(st: &State, data: &Value) -> Result<Value, (&'static str, String)> {
    if let Some(ids) = data.get("function_ids").and_then(Value::as_array) {
        if ids.len() > INFO_BATCH_MAX {
            return Err((
                "INVALID_ARGUMENTS",
                format!("`function_ids` accepts at most {INFO_BATCH_MAX} ids"),
            ));
        }
        let functions: Vec<Value> = ids
            .iter()
            .map(|id| {
                let id = id.as_str().unwrap_or_default();
                info_entry(st, id)
                    .unwrap_or_else(|| json!({"function_id": id, "error": "not_found"}))
            })
            .collect();
        return Ok(json!({ "functions": functions }));
    }
    match data.get("function_id").and_then(Value::as_str) {
        Some(id) => info_entry(st, id)
            .ok_or_else(|| ("NOT_FOUND", format!("Function '{id}' is not registered."))),
        None => Err((
            "INVALID_ARGUMENTS",
            "missing field `function_id` (or `function_ids` for a batch)".to_string(),
        )),
    }
}

/// `engine::workers::list`, as the engine builds it: the connections that
/// reported a `pid` through `engine::workers::register` (the others, a raw
/// client or a worker that never named itself, are not listed; transcripts/01),
/// then the engine's in-process workers, sorted by name (or id) and id.
pub(super) fn workers_list(st: &State) -> Value {
    let mut rows: Vec<(String, String, Value)> = Vec::new();
    for (uuid, w) in &st.workers {
        if w.metadata.get("pid").is_none_or(Value::is_null) {
            continue;
        }
        let id = uuid.to_string();
        let count = st.functions.values().filter(|f| f.owner == *uuid).count();
        let row = json!({
            "id": id,
            "name": w.name,
            "namespace": w.namespace,
            "runtime": w.metadata.get("runtime").and_then(Value::as_str).unwrap_or("unknown"),
            "version": w.metadata.get("version"),
            "os": w.metadata.get("os"),
            "description": w.metadata.get("description"),
            "function_count": count,
            "active_invocations": st.pending.values().filter(|p| p.callee == *uuid).count(),
            "connected_at_ms": w.connected_at_ms as u64,
            "ip_address": Value::Null,
            "isolation": w.metadata.get("isolation"),
            // The engine never moves a socket worker off its initial status.
            "status": "connected",
        });
        rows.push((w.name.clone().unwrap_or_else(|| id.clone()), id, row));
    }
    for (name, description, count) in IN_PROCESS_WORKERS {
        let row = json!({
            "id": name,
            "name": name,
            "namespace": DEFAULT_NAMESPACE,
            "runtime": "engine",
            "version": ENGINE_VERSION,
            "os": Value::Null,
            "description": description,
            "function_count": count,
            "active_invocations": 0,
            "connected_at_ms": st.started_at_ms as u64,
            "ip_address": Value::Null,
            "isolation": "in-process",
            "status": "available",
        });
        rows.push((name.to_string(), name.to_string(), row));
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    json!({ "workers": rows.into_iter().map(|(_, _, row)| row).collect::<Vec<_>>() })
}
