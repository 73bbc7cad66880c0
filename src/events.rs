//! Lifecycle events: the `sandbox-code-runner::event` trigger type.
//!
//! Subscribers bind a function of theirs to the trigger type; the worker
//! calls it once per event, in order, with the same non-secret metadata the
//! inventory shows (`list_runtimes`), never a runtime id or a sandbox id.
//!
//! **The trigger mechanism lives in this module only.** The engine this
//! worker is measured against (0.23) speaks `registertriggertype` /
//! `registertrigger` frames: the worker declares the type, the engine
//! forwards each subscriber's binding to it, and the worker calls the bound
//! function when an event happens. iii-sdk 0.25 deprecates that in favour of
//! `observe` descriptors, which that engine does not support. Moving to
//! `observe` means replacing [`provide_over_sdk`] with a function registered
//! with an `Observe::owner()` descriptor whose `on_observer_added` /
//! `on_observer_removed` feed [`Hub::subscribe`] / [`Hub::unsubscribe`];
//! the [`Hub`] and every emitter stay as they are.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::bus::Bus;
use crate::guest_access::SCOPE_KEY;
use crate::tenancy::Lineage;

/// The trigger type subscribers bind to.
pub use crate::function_ids::EVENT_TRIGGER_TYPE as TRIGGER_TYPE;

/// How long one subscriber call may take before that subscriber's next
/// event goes out.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Events waiting for one subscriber; more are dropped (and counted), so a
/// slow subscriber never slows a `run` nor holds memory without bound.
const QUEUE: usize = 256;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventKind {
    #[serde(rename = "runtime.created")]
    RuntimeCreated,
    #[serde(rename = "function.registered")]
    FunctionRegistered,
    #[serde(rename = "function.unregistered")]
    FunctionUnregistered,
    #[serde(rename = "runtime.expired")]
    RuntimeExpired,
    #[serde(rename = "runtime.torn_down")]
    RuntimeTornDown,
    #[serde(rename = "orphans.swept")]
    OrphansSwept,
}

impl EventKind {
    pub const ALL: [EventKind; 6] = [
        EventKind::RuntimeCreated,
        EventKind::FunctionRegistered,
        EventKind::FunctionUnregistered,
        EventKind::RuntimeExpired,
        EventKind::RuntimeTornDown,
        EventKind::OrphansSwept,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RuntimeCreated => "runtime.created",
            EventKind::FunctionRegistered => "function.registered",
            EventKind::FunctionUnregistered => "function.unregistered",
            EventKind::RuntimeExpired => "runtime.expired",
            EventKind::RuntimeTornDown => "runtime.torn_down",
            EventKind::OrphansSwept => "orphans.swept",
        }
    }
}

/// One event as subscribers receive it.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub event: EventKind,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The runtime's inventory entry (handle, kind, lang, namespace, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Value>,
    /// The function registered or unregistered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_id: Option<String>,
    /// VMs stopped by the boot-time orphan sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swept: Option<usize>,
    /// The lineage that owns the runtime, when guest code created it. Never
    /// sent: it only decides which scoped subscribers see the event.
    #[serde(skip)]
    pub owner: Option<Lineage>,
}

/// A subscriber's binding: which function, and its optional filters
/// (`config.events`: event names; `config.namespace`).
#[derive(Debug, Clone)]
struct Subscriber {
    function_id: String,
    events: Option<Vec<String>>,
    namespace: Option<String>,
    /// Set by the guest listener's trigger hook: a guest's subscription
    /// sees only what its own lineage owns.
    scope: Option<String>,
    /// Its own delivery queue and task, started with its first event: one
    /// subscriber that is slow or never answers delays only itself.
    queue: OnceLock<mpsc::Sender<Value>>,
}

impl Subscriber {
    fn from_config(function_id: String, config: &Value) -> Subscriber {
        let events = config.get("events").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        });
        let namespace = config
            .get("namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let scope = config
            .get(SCOPE_KEY)
            .and_then(Value::as_str)
            .map(str::to_string);
        Subscriber {
            function_id,
            events,
            namespace,
            scope,
            queue: OnceLock::new(),
        }
    }

    fn wants(&self, e: &Event) -> bool {
        let kind_ok = self
            .events
            .as_ref()
            .is_none_or(|ev| ev.iter().any(|k| k == e.event.as_str()));
        // `app` and `app::` name the same namespace.
        let bare = |s: &str| s.trim_end_matches("::").to_string();
        let ns_ok = self.namespace.as_ref().is_none_or(|ns| {
            e.runtime
                .as_ref()
                .and_then(|r| r.get("namespace"))
                .and_then(Value::as_str)
                .map(bare)
                == Some(bare(ns))
        });
        let scope_ok = self
            .scope
            .as_deref()
            .is_none_or(|l| e.owner.as_ref().map(Lineage::as_str) == Some(l));
        kind_ok && ns_ok && scope_ok
    }
}

type Table = Arc<Mutex<BTreeMap<String, Subscriber>>>;

fn table(t: &Table) -> std::sync::MutexGuard<'_, BTreeMap<String, Subscriber>> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// The subscribers, each with its own ordered delivery queue.
pub struct Hub {
    bus: Weak<dyn Bus>,
    subscribers: Table,
    dropped: AtomicU64,
}

impl Hub {
    pub fn new(bus: &Arc<dyn Bus>) -> Hub {
        Hub {
            bus: Arc::downgrade(bus),
            subscribers: Table::default(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Adds (or replaces) the binding `id`.
    pub fn subscribe(&self, id: &str, function_id: &str, config: &Value) {
        table(&self.subscribers).insert(
            id.to_string(),
            Subscriber::from_config(function_id.to_string(), config),
        );
        tracing::info!(function_id, "lifecycle subscriber bound");
    }

    /// Removes the binding `id`; its delivery task ends with its queue.
    pub(crate) fn unsubscribe(&self, id: &str) {
        table(&self.subscribers).remove(id);
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        table(&self.subscribers).len()
    }

    /// Subscriptions scoped to `lineage`: what its guests hold.
    pub(crate) fn scoped_to(&self, lineage: &Lineage) -> usize {
        table(&self.subscribers)
            .values()
            .filter(|s| s.scope.as_deref() == Some(lineage.as_str()))
            .count()
    }

    /// Events dropped because a subscriber's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues `e` for every subscriber that wants it, each on its own
    /// queue. Free when nobody listens.
    pub(crate) fn emit(&self, e: Event) {
        let subscribers = table(&self.subscribers);
        if subscribers.is_empty() {
            return;
        }
        let Ok(payload) = serde_json::to_value(&e) else {
            return;
        };
        for s in subscribers.values().filter(|s| s.wants(&e)) {
            let queue = s.queue.get_or_init(|| self.deliver_to(&s.function_id));
            if queue.try_send(payload.clone()).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The task that delivers one subscriber's events, in the order they
    /// happened, each within [`DELIVERY_TIMEOUT`].
    fn deliver_to(&self, function_id: &str) -> mpsc::Sender<Value> {
        let (tx, mut rx) = mpsc::channel::<Value>(QUEUE);
        let bus = self.bus.clone();
        let function_id = function_id.to_string();
        tokio::spawn(async move {
            while let Some(payload) = rx.recv().await {
                let Some(bus) = bus.upgrade() else { return };
                if let Err(err) = bus.call(&function_id, payload, DELIVERY_TIMEOUT).await {
                    tracing::debug!(function_id = %function_id, code = %err.code, "lifecycle event not delivered");
                }
            }
        });
        tx
    }
}

/// Declares [`TRIGGER_TYPE`] on the engine and feeds the bindings it
/// forwards into `hub`: the 0.23 engine's `registertriggertype` mechanism.
pub fn provide_over_sdk(client: &iii_sdk::IIIClient, hub: Arc<Hub>) {
    #[allow(deprecated)] // the measured engine has no `observe`; see the module doc
    client.register_trigger_type(iii_sdk::RegisterTriggerType::new(
        TRIGGER_TYPE,
        "Lifecycle of sandbox-code-runner runtimes: runtime.created, function.registered, \
         function.unregistered, runtime.expired, runtime.torn_down, orphans.swept. Config: \
         {events?: [names], namespace?: string}. Payloads carry a non-secret handle, never a runtime id.",
        Provider(hub),
    ));
}

struct Provider(Arc<Hub>);

#[async_trait::async_trait]
impl iii_sdk::trigger::TriggerHandler for Provider {
    async fn register_trigger(
        &self,
        c: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        self.0.subscribe(&c.id, &c.function_id, &c.config);
        Ok(())
    }

    async fn unregister_trigger(
        &self,
        c: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        self.0.unsubscribe(&c.id);
        Ok(())
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, ns: Option<&str>) -> Event {
        Event {
            event: kind,
            at_ms: 1,
            runtime: Some(serde_json::json!({"handle": "h-1", "namespace": ns})),
            function_id: None,
            swept: None,
            owner: None,
        }
    }

    #[test]
    fn filters_by_event_name_and_namespace_in_either_form() {
        let all = Subscriber::from_config("a::f".into(), &serde_json::json!({}));
        let expired = Subscriber::from_config(
            "a::f".into(),
            &serde_json::json!({"events": ["runtime.expired"]}),
        );
        let app = Subscriber::from_config("a::f".into(), &serde_json::json!({"namespace": "app"}));
        let created = event(EventKind::RuntimeCreated, Some("app::"));
        assert!(all.wants(&created));
        assert!(!expired.wants(&created));
        assert!(expired.wants(&event(EventKind::RuntimeExpired, None)));
        assert!(app.wants(&created));
        assert!(!app.wants(&event(EventKind::RuntimeCreated, Some("other::"))));
        assert!(!app.wants(&event(EventKind::RuntimeCreated, None)));
    }

    #[test]
    fn a_scoped_subscriber_sees_only_its_lineages_events() {
        let mine = Lineage::fresh();
        let scoped = Subscriber::from_config(
            "g::sink".into(),
            &serde_json::json!({ SCOPE_KEY: mine.as_str() }),
        );
        let owned = |owner: Option<Lineage>| Event {
            owner,
            ..event(EventKind::RuntimeCreated, Some("app::"))
        };
        assert!(scoped.wants(&owned(Some(mine.clone()))));
        assert!(!scoped.wants(&owned(Some(Lineage::fresh()))));
        assert!(!scoped.wants(&owned(None)));
        let operator = Subscriber::from_config("ops::sink".into(), &serde_json::json!({}));
        assert!(operator.wants(&owned(Some(mine))));
        let payload = serde_json::to_value(owned(Some(Lineage::fresh()))).unwrap();
        assert!(payload.get("owner").is_none(), "{payload}");
    }

    #[test]
    fn names_serialize_as_documented() {
        for k in EventKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
