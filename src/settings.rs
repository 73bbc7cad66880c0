//! The live knob: the `sandbox-code-runner` entry of the engine's
//! configuration worker (`inject_guidance`), hot-applied through the
//! `configuration` trigger, and the agent-prompt guidance hook it controls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::bus::{Bus, TriggerBinding};

/// The configuration entry id.
pub(crate) const ENTRY_ID: &str = "sandbox-code-runner";
/// Internal: appends the guidance to an agent's system prompt.
pub use crate::function_ids::GUIDANCE_FN;
/// Internal: receives configuration change events.
pub(crate) use crate::function_ids::ON_CHANGE_FN;
/// The harness hook the guidance function is bound to.
pub(crate) use crate::function_ids::PRE_GENERATE_HOOK as HOOK_TRIGGER;

/// The worker's live settings, as stored by the configuration worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(title = "sandbox-code-runner settings")]
pub struct LiveSettings {
    /// Append usage guidance for run / register_function / teardown to every
    /// agent system prompt (the harness pre-generate hook). Turn off to
    /// shrink prompts; the functions stay in the catalog either way.
    pub inject_guidance: bool,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            inject_guidance: true,
        }
    }
}

/// The slice of the harness's pre-generate envelope the hook reads.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[schemars(title = "PreGenerateEvent")]
pub struct PreGenerateEvent {
    #[serde(default)]
    pub generate: GenerateContext,
}

/// The generation the hook may change.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GenerateContext {
    /// The system prompt assembled so far.
    #[serde(default)]
    pub system_prompt: String,
}

/// The hook's answer to the harness.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(title = "PreGenerateResponse")]
pub struct PreGenerateResponse {
    pub mutations: PreGenerateMutations,
}

/// What to change; an absent `system_prompt` is the no-op.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PreGenerateMutations {
    /// The full replacement prompt (the harness overwrites, it does not merge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

/// The configuration trigger's event, as far as this worker reads it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(title = "OnConfigChangeRequest")]
pub struct OnConfigChangeRequest {}

/// Acknowledges a configuration event.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(title = "OnConfigChangeResponse")]
pub struct OnConfigChangeResponse {
    pub ok: bool,
}

/// What agents are told about this worker.
pub(crate) const GUIDANCE: &str = "\
## Running code (sandbox-code-runner)
- `sandbox-code-runner::run {lang: \"python\"|\"node\", code}` runs code in a fresh microVM and destroys it before answering (one-shot). Add `keep: true` to keep the VM; the answer's `runtime_id` then runs more code there: `run {runtime_id, code}`.
- On a kept runtime, files and installed packages persist between runs; variables do not (every run is a fresh process). Keep state in files, or keep the VM with `keep: true, session: true`: later runs then share one interpreter, like a notebook's cells (python globals; node `globalThis`), until a run times out (the answer's `session` says `reset`).
- A failing script is still an answer: check `success`, `exit_code` and `stderr`. Errors (`sandbox-code-runner::…`) mean bad input or infrastructure.
- `sandbox-code-runner::register_function {function_id: \"my-app::name\", lang, source}` publishes a bus function. `source` defines `handler(payload)` (python `def handler(payload):`, node `export function handler(payload)`) returning JSON; call it like any function.
- `sandbox-code-runner::teardown {runtime_id}` or `{namespace: \"my-app\"}` stops runtimes you no longer need and unregisters their functions.
- `runtime_id` is a secret: it is the capability to use and stop that VM. Never show it to users or write it to logs.
- Code in the VM has a global `iii` (the iii SDK): `await iii.trigger({function_id, payload})` in node, `iii.trigger({...})` in python.
";

/// The hook's answer: the prompt with the guidance appended, or a no-op.
pub(crate) fn guidance_mutation(enabled: bool, request: &Value) -> Value {
    if !enabled {
        return json!({"mutations": {}});
    }
    let prompt = request
        .get("generate")
        .and_then(|g| g.get("system_prompt"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let system_prompt = if prompt.is_empty() {
        GUIDANCE.to_string()
    } else {
        format!("{}\n\n{GUIDANCE}", prompt.trim_end())
    };
    json!({"mutations": {"system_prompt": system_prompt}})
}

/// The live settings and the hook binding they imply.
pub struct Settings {
    bus: Arc<dyn Bus>,
    current: Mutex<LiveSettings>,
    hook: Mutex<Option<TriggerBinding>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Settings {
    pub fn new(bus: Arc<dyn Bus>) -> Arc<Settings> {
        Arc::new(Settings {
            bus,
            current: Mutex::new(LiveSettings::default()),
            hook: Mutex::new(None),
        })
    }

    pub fn current(&self) -> LiveSettings {
        lock(&self.current).clone()
    }

    /// Applies a stored value; a malformed one keeps the defaults.
    pub fn apply(&self, value: &Value) {
        let next: LiveSettings = if value.is_null() {
            LiveSettings::default()
        } else {
            serde_json::from_value(value.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "ignoring a malformed configuration value");
                LiveSettings::default()
            })
        };
        *lock(&self.current) = next.clone();
        let mut hook = lock(&self.hook);
        match (next.inject_guidance, hook.is_some()) {
            (true, false) => match self.bus.bind(HOOK_TRIGGER, GUIDANCE_FN, json!({})) {
                Ok(b) => {
                    *hook = Some(b);
                    tracing::info!("guidance hook bound");
                }
                Err(e) => tracing::warn!(error = %e, "cannot bind the guidance hook"),
            },
            (false, true) => {
                if let Some(b) = hook.take() {
                    self.bus.unbind(b);
                    tracing::info!("guidance hook unbound");
                }
            }
            _ => {}
        }
    }

    /// Registers the entry, subscribes to its changes and applies the stored
    /// value. Without a configuration worker the defaults apply.
    pub async fn boot(self: &Arc<Self>) {
        let schema = serde_json::to_value(schemars::schema_for!(LiveSettings)).unwrap_or(json!({}));
        let registered = self
            .bus
            .call(
                "configuration::register",
                json!({
                    "id": ENTRY_ID,
                    "name": "sandbox-code-runner",
                    "description": "Live settings of the sandbox-code-runner worker.",
                    "schema": schema,
                }),
                Duration::from_secs(10),
            )
            .await;
        if let Err(e) = registered {
            tracing::warn!(
                code = %e.code,
                "configuration worker unavailable; running on default settings (inject_guidance: true)"
            );
            self.apply(&Value::Null);
            return;
        }
        if let Err(e) = self.bus.bind(
            "configuration",
            ON_CHANGE_FN,
            json!({"configuration_id": ENTRY_ID}),
        ) {
            tracing::warn!(error = %e, "cannot subscribe to configuration changes");
        }
        let value = self
            .bus
            .call(
                "configuration::get",
                json!({"id": ENTRY_ID}),
                Duration::from_secs(10),
            )
            .await
            .ok()
            .and_then(|v| v.get("value").cloned())
            .unwrap_or(Value::Null);
        self.apply(&value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guidance_text_is_stable() {
        insta::assert_snapshot!("guidance", GUIDANCE);
    }

    #[test]
    fn guidance_is_appended_or_a_no_op() {
        let on = guidance_mutation(
            true,
            &json!({"generate": {"system_prompt": "You are helpful."}}),
        );
        let p = on["mutations"]["system_prompt"].as_str().unwrap();
        assert!(p.starts_with("You are helpful.\n\n## Running code"));
        assert_eq!(
            guidance_mutation(false, &json!({})),
            json!({"mutations": {}})
        );
        let bare = guidance_mutation(true, &json!({}));
        assert_eq!(bare["mutations"]["system_prompt"], GUIDANCE);
    }

    #[test]
    fn guidance_covers_what_agents_must_know() {
        for needle in [
            "one-shot",
            "keep: true",
            "files",
            "variables do not",
            "session: true",
            "failing script",
            "register_function",
            "handler(payload)",
            "teardown",
            "secret",
        ] {
            assert!(GUIDANCE.contains(needle), "guidance mentions {needle}");
        }
        assert!(!GUIDANCE.contains("rt-"), "no runtime id example");
    }

    #[test]
    fn settings_default_on_and_parse() {
        assert!(LiveSettings::default().inject_guidance);
        let s: LiveSettings = serde_json::from_value(json!({})).unwrap();
        assert!(s.inject_guidance);
    }
}
