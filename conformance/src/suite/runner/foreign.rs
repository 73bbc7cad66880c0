//! What a case does on the bus from the suite's own client, beside the
//! target: finding a sandbox by a file it holds, subscribing to a trigger
//! type, registering a function as another worker would.

use std::time::Duration;

use futures_util::future::join_all;
use iii_sdk::RegisterFunction;
use serde_json::{json, Value};

use super::{lock, CaseRun, Outcome};

impl CaseRun<'_> {
    /// The one live sandbox holding `file`.
    pub(super) async fn locate_sandbox(&self, file: &str) -> Result<Value, String> {
        let listed = match self.trigger("sandbox::list", json!({}), 10_000).await {
            Outcome::Response(v) => v,
            Outcome::Error { code, message } => {
                return Err(format!("sandbox::list failed: {code}: {message}"))
            }
            Outcome::Transport(e) => return Err(format!("sandbox::list failed: {e}")),
        };
        let ids: Vec<String> = listed
            .get("sandboxes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|s| s.get("stopped") != Some(&Value::Bool(true)))
                    .filter_map(|s| s.get("sandbox_id").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let probes = ids.iter().map(|id| async move {
            let r = self
                .trigger(
                    "sandbox::fs::read",
                    json!({ "sandbox_id": id, "path": file }),
                    10_000,
                )
                .await;
            matches!(r, Outcome::Response(_)).then(|| id.clone())
        });
        let found: Vec<String> = join_all(probes).await.into_iter().flatten().collect();
        match found.as_slice() {
            [] => Ok(json!({ "found": false })),
            [one] => Ok(json!({ "found": true, "sandbox_id": one })),
            many => Err(format!("{file} exists in {} sandboxes", many.len())),
        }
    }

    /// Registers a recording function and binds it to `trigger_type`.
    pub(super) fn subscribe(
        &self,
        trigger_type: &str,
        config: Option<Value>,
    ) -> Result<Value, String> {
        let function_id = format!("conformance.subscriber::{}", uuid::Uuid::new_v4().simple());
        let sink = self.received.clone();
        let reg = RegisterFunction::new_async(move |payload: Value| {
            let sink = sink.clone();
            async move {
                lock(&sink).push(payload);
                Ok::<Value, iii_sdk::Error>(json!({ "received": true }))
            }
        })
        .description("records events for a code-runner-conformance case");
        let f = self.env.client.register_function(function_id.clone(), reg);
        #[allow(deprecated)] // the engine speaks trigger types
        let bound = self
            .env
            .client
            .register_trigger(iii_sdk::protocol::RegisterTriggerInput {
                trigger_type: trigger_type.to_string(),
                function_id,
                config: config.unwrap_or_else(|| json!({})),
                metadata: None,
                namespace: None,
                trigger_namespace: None,
            });
        match bound {
            Ok(t) => {
                lock(&self.subscriptions).push((f, t));
                Ok(json!({ "subscribed": true }))
            }
            Err(e) => {
                f.unregister();
                Err(format!("cannot bind to {trigger_type}: {e}"))
            }
        }
    }

    /// Registers a function from the suite's own client, visible on the bus.
    pub(super) async fn register_foreign(&self, function_id: &str) -> Result<Value, String> {
        let reg = RegisterFunction::new_async(|payload: Value| async move {
            Ok::<Value, iii_sdk::Error>(payload)
        })
        .description("registered by code-runner-conformance (another worker on the bus)");
        let f = self.env.client.register_function(function_id, reg);
        lock(&self.foreign).push(f);
        let ids = [function_id.to_string()];
        let listed = crate::standin::wait::until(Duration::from_secs(10), || async {
            crate::suite::env::functions_listed(&self.env.client, &ids).await == Some(true)
        })
        .await;
        if listed {
            Ok(json!({ "registered": true }))
        } else {
            Err(format!("{function_id} never showed up on the bus"))
        }
    }
}
