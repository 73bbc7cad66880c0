//! The live knob's two internal functions: `inject-guidance` (the agent
//! prompt hook's body) and `on-config-change` (the configuration worker's
//! change events for the `sandbox-code-runner` entry).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::error::WorkerError;
use crate::function_ids::{GUIDANCE_FN, ON_CHANGE_FN};
use crate::settings::{
    guidance_mutation, OnConfigChangeRequest, OnConfigChangeResponse, PreGenerateEvent,
    PreGenerateResponse, Settings, ENTRY_ID,
};

/// Publishes both; `settings` applies what the configuration worker sends.
pub fn publish(bus: &dyn Bus, settings: &Arc<Settings>) {
    let me = settings.clone();
    let guidance: Handler = Arc::new(move |req: Value| {
        let me = me.clone();
        Box::pin(async move { Ok(guidance_mutation(me.current().inject_guidance, &req)) })
    });
    bus.publish(
        FunctionSpec {
            id: GUIDANCE_FN.into(),
            description: Some(
                "Internal: appends sandbox-code-runner usage guidance to an agent's system prompt."
                    .into(),
            ),
            request_format: Some(crate::wire::schema_of::<PreGenerateEvent>()),
            response_format: Some(crate::wire::schema_of::<PreGenerateResponse>()),
            metadata: Some(json!({"internal": true})),
        },
        guidance,
    );
    let me = settings.clone();
    let on_change: Handler = Arc::new(move |event: Value| {
        let me = me.clone();
        Box::pin(async move {
            if event.get("id").and_then(Value::as_str) == Some(ENTRY_ID) {
                me.apply(event.get("new_value").unwrap_or(&Value::Null));
            }
            Ok::<Value, WorkerError>(json!({"ok": true}))
        })
    });
    bus.publish(
        FunctionSpec {
            id: ON_CHANGE_FN.into(),
            description: Some(
                "Internal: hot-applies sandbox-code-runner settings on change.".into(),
            ),
            request_format: Some(crate::wire::schema_of::<OnConfigChangeRequest>()),
            response_format: Some(crate::wire::schema_of::<OnConfigChangeResponse>()),
            metadata: Some(json!({"internal": true})),
        },
        on_change,
    );
}
