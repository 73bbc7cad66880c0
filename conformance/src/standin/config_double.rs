//! A double of the engine's configuration worker: `configuration::register`,
//! `get`, `set`, `list`, `schema`, and the `configuration` trigger type that
//! fans every change out to its subscribers. Entries persist as one YAML
//! file per id in a directory, as the real worker persists them.
//!
//! Shapes and codes follow the recorded engine (`docs/engine.md`,
//! transcripts/03): `NOT_FOUND` for an unknown id, `SCHEMA_INVALID` for a
//! value the schema refuses, event payloads with `event_type`, `old_value`,
//! `new_value`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::trigger::{TriggerConfig, TriggerHandler};
use iii_sdk::{Error, IIIClient, RegisterFunction, RegisterTriggerType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One stored entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Entry {
    id: String,
    name: String,
    description: String,
    schema: Value,
    value: Value,
}

#[derive(Clone)]
struct Subscriber {
    function_id: String,
    configuration_id: Option<String>,
    event_types: Option<Vec<String>>,
}

#[derive(Default)]
struct Store {
    entries: BTreeMap<String, Entry>,
    subscribers: BTreeMap<String, Subscriber>,
}

type Shared = Arc<Mutex<Store>>;

/// Why the double could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigDoubleError {
    #[error("cannot use the configuration directory {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to the engine: {0}")]
    Connect(String),
}

/// A running configuration-worker double.
pub(crate) struct ConfigDouble {
    client: IIIClient,
}

fn remote(code: &str, message: impl Into<String>) -> Error {
    Error::Remote {
        code: code.into(),
        message: message.into(),
        stacktrace: None,
    }
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Store> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn validate(schema: &Value, value: &Value) -> Result<(), Error> {
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        remote(
            "SCHEMA_INVALID",
            format!("schema is not a valid JSON Schema: {e}"),
        )
    })?;
    if let Some(err) = validator.iter_errors(value).next() {
        return Err(remote(
            "SCHEMA_INVALID",
            format!("schema validation failed: {err}"),
        ));
    }
    Ok(())
}

fn persist(dir: &Path, e: &Entry) {
    let path = dir.join(format!("{}.yaml", e.id));
    match serde_yaml::to_string(e) {
        Ok(text) => {
            if let Err(err) = std::fs::write(&path, text) {
                tracing::warn!(path = %path.display(), error = %err, "cannot persist configuration");
            }
        }
        Err(err) => tracing::warn!(error = %err, "cannot encode configuration"),
    }
}

fn load(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for f in rd.flatten() {
        if f.path().extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(f.path()) {
            if let Ok(e) = serde_yaml::from_str::<Entry>(&text) {
                out.insert(e.id.clone(), e);
            }
        }
    }
    out
}

fn str_arg(data: &Value, key: &str) -> Result<String, Error> {
    data.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| remote("INVALID_ARGUMENTS", format!("missing field `{key}`")))
}

struct Subscriptions(Shared);

#[async_trait::async_trait]
impl TriggerHandler for Subscriptions {
    async fn register_trigger(&self, config: TriggerConfig) -> Result<(), Error> {
        let sub = Subscriber {
            function_id: config.function_id.clone(),
            configuration_id: config
                .config
                .get("configuration_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            event_types: config
                .config
                .get("event_types")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                }),
        };
        lock(&self.0).subscribers.insert(config.id, sub);
        Ok(())
    }

    async fn unregister_trigger(&self, config: TriggerConfig) -> Result<(), Error> {
        lock(&self.0).subscribers.remove(&config.id);
        Ok(())
    }
}

/// Invokes every subscriber of `entry` with the change event.
fn fan_out(client: &IIIClient, store: &Shared, event_type: &str, entry: &Entry, old_value: Value) {
    let subs: Vec<Subscriber> = lock(store)
        .subscribers
        .values()
        .filter(|s| {
            s.configuration_id
                .as_deref()
                .is_none_or(|id| id == entry.id)
        })
        .filter(|s| {
            s.event_types
                .as_ref()
                .is_none_or(|t| t.iter().any(|t| t == event_type))
        })
        .cloned()
        .collect();
    let event = json!({
        "type": "configuration",
        "event_type": event_type,
        "id": entry.id,
        "name": entry.name,
        "description": entry.description,
        "schema": entry.schema,
        "old_value": old_value,
        "new_value": entry.value,
    });
    for s in subs {
        let client = client.clone();
        let event = event.clone();
        tokio::spawn(async move {
            let r = client
                .trigger(TriggerRequest {
                    function_id: s.function_id.clone(),
                    payload: event,
                    action: None,
                    timeout_ms: Some(30_000),
                })
                .await;
            if let Err(e) = r {
                tracing::debug!(function_id = %s.function_id, error = %e, "configuration subscriber failed");
            }
        });
    }
}

impl ConfigDouble {
    /// Connects as the worker `configuration`, persisting under `dir`.
    pub(crate) async fn start(
        engine_url: &str,
        dir: &Path,
    ) -> Result<ConfigDouble, ConfigDoubleError> {
        std::fs::create_dir_all(dir).map_err(|source| ConfigDoubleError::Dir {
            path: dir.display().to_string(),
            source,
        })?;
        let dir: PathBuf = dir.to_path_buf();
        let store: Shared = Arc::new(Mutex::new(Store {
            entries: load(&dir),
            subscribers: BTreeMap::new(),
        }));
        let client = crate::standin::client::connect_named(engine_url, "configuration")
            .await
            .map_err(|e| ConfigDoubleError::Connect(e.to_string()))?;

        #[allow(deprecated)] // the engine under test speaks trigger types, not observe
        client.register_trigger_type(RegisterTriggerType::new(
            "configuration",
            "Configuration trigger — fires on register/update/delete events",
            Subscriptions(store.clone()),
        ));

        let (s, d, c) = (store.clone(), dir.clone(), client.clone());
        client.register_function(
            "configuration::register",
            RegisterFunction::new_async(move |data: Value| {
                let (s, d, c) = (s.clone(), d.clone(), c.clone());
                async move {
                    let id = str_arg(&data, "id")?;
                    let schema = data.get("schema").cloned().unwrap_or(json!({}));
                    let initial = data.get("initial_value").cloned();
                    if let Some(v) = &initial {
                        validate(&schema, v)?;
                    }
                    let (entry, old) = {
                        let mut st = lock(&s);
                        let old = st.entries.get(&id).map(|e| e.value.clone());
                        let entry = Entry {
                            id: id.clone(),
                            name: data
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or(&id)
                                .to_string(),
                            description: data
                                .get("description")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                            schema,
                            value: initial.or(old.clone()).unwrap_or(Value::Null),
                        };
                        st.entries.insert(id, entry.clone());
                        (entry, old.unwrap_or(Value::Null))
                    };
                    persist(&d, &entry);
                    fan_out(&c, &s, "configuration:registered", &entry, old);
                    Ok(serde_json::to_value(&entry).unwrap_or(Value::Null))
                }
            })
            .description("Register a configuration id with a name, description, and JSON Schema."),
        );

        let s = store.clone();
        client.register_function(
            "configuration::get",
            RegisterFunction::new_async(move |data: Value| {
                let s = s.clone();
                async move {
                    let id = str_arg(&data, "id")?;
                    let st = lock(&s);
                    let e = st.entries.get(&id).ok_or_else(|| {
                        remote("NOT_FOUND", format!("configuration '{id}' not found"))
                    })?;
                    Ok(json!({"id": e.id, "value": e.value}))
                }
            })
            .description("Read a configuration by id."),
        );

        let (s, d, c) = (store.clone(), dir.clone(), client.clone());
        client.register_function(
            "configuration::set",
            RegisterFunction::new_async(move |data: Value| {
                let (s, d, c) = (s.clone(), d.clone(), c.clone());
                async move {
                    let id = str_arg(&data, "id")?;
                    let value = data.get("value").cloned().unwrap_or(Value::Null);
                    let schema = lock(&s)
                        .entries
                        .get(&id)
                        .map(|e| e.schema.clone())
                        .ok_or_else(|| {
                            remote("NOT_FOUND", format!("configuration '{id}' not found"))
                        })?;
                    validate(&schema, &value)?;
                    let (entry, old) = {
                        let mut st = lock(&s);
                        let Some(e) = st.entries.get_mut(&id) else {
                            return Err(remote(
                                "NOT_FOUND",
                                format!("configuration '{id}' not found"),
                            ));
                        };
                        let old = std::mem::replace(&mut e.value, value);
                        (e.clone(), old)
                    };
                    persist(&d, &entry);
                    fan_out(&c, &s, "configuration:updated", &entry, old.clone());
                    Ok(json!({"old_value": old, "new_value": entry.value}))
                }
            })
            .description("Replace the value of an already-registered configuration."),
        );

        let s = store.clone();
        client.register_function(
            "configuration::list",
            RegisterFunction::new_async(move |_data: Value| {
                let s = s.clone();
                async move {
                    let st = lock(&s);
                    let list: Vec<Value> = st
                        .entries
                        .values()
                        .map(|e| json!({"id": e.id, "name": e.name, "description": e.description, "schema": e.schema}))
                        .collect();
                    Ok(json!({"configurations": list}))
                }
            })
            .description("List every registered configuration, sorted by id; never the stored value."),
        );

        let s = store.clone();
        client.register_function(
            "configuration::schema",
            RegisterFunction::new_async(move |data: Value| {
                let s = s.clone();
                async move {
                    let id = str_arg(&data, "id")?;
                    let st = lock(&s);
                    let e = st
                        .entries
                        .get(&id)
                        .ok_or_else(|| remote("NOT_FOUND", format!("configuration '{id}' not found")))?;
                    Ok(json!({"id": e.id, "name": e.name, "description": e.description, "schema": e.schema}))
                }
            })
            .description("Retrieve the schema, name, and description for a configuration id."),
        );

        // Ready once the engine routes to it.
        let ready = crate::standin::client::wait_routable(
            &client,
            "configuration::list",
            Duration::from_secs(10),
        )
        .await;
        if !ready {
            return Err(ConfigDoubleError::Connect(
                "configuration functions never became routable".into(),
            ));
        }
        Ok(ConfigDouble { client })
    }

    /// Disconnects; its functions vanish from the engine.
    pub(crate) async fn shutdown(self) {
        self.client.shutdown_async().await;
    }
}
