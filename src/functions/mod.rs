//! One module per bus function: decode at the edge, call the manager,
//! encode. Nothing below here sees JSON requests.

pub mod guest_auth;
pub mod guest_gate;
pub(crate) mod handler_call;
pub mod list_runtimes;
pub mod register;
pub mod run;
pub mod settings;
pub mod teardown;
pub mod watch;

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::error::WorkerError;
use crate::metering::{metered, OpTotals};
use crate::runtime::Manager;
use crate::tenancy::Caller;

pub use crate::function_ids::{
    LIST_RUNTIMES, REGISTER_FUNCTION, RUN, STATS, TEARDOWN, UI_CONTENT, WATCH,
};

fn encode<T: Serialize>(v: T) -> Result<Value, WorkerError> {
    serde_json::to_value(v)
        .map_err(|e| WorkerError::Engine(format!("cannot encode the response: {e}")))
}

/// A bus handler that meters `f` as one operation of `totals` and encodes
/// its answer (the inventory's handler).
fn metered_handler<T, F, Fut>(manager: &Arc<Manager>, totals: Arc<OpTotals>, f: F) -> Handler
where
    T: Serialize,
    F: Fn(Arc<Manager>, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, WorkerError>> + Send + 'static,
{
    let m = manager.clone();
    let f = Arc::new(f);
    Arc::new(move |p| {
        let (m, f, totals) = (m.clone(), f.clone(), totals.clone());
        Box::pin(async move { encode(metered(&totals, f(m, p)).await?) })
    })
}

/// The worker's three public functions, the ones [`serve_as`] serves.
pub(crate) const OWN: [&str; 3] = [RUN, REGISTER_FUNCTION, TEARDOWN];

/// One of [`OWN`], decoded, metered as one operation of its kind and
/// encoded, for `caller`: what the main listener's handlers and the guest
/// middleware both serve.
pub(crate) async fn serve_as(
    m: &Manager,
    caller: &Caller,
    function_id: &str,
    payload: Value,
) -> Result<Value, WorkerError> {
    let stats = m.stats();
    match function_id {
        RUN => encode(metered(&stats.run, run::handle(m, caller, payload)).await?),
        REGISTER_FUNCTION => encode(
            metered(
                &stats.register_function,
                register::handle(m, caller, payload),
            )
            .await?,
        ),
        TEARDOWN => encode(metered(&stats.teardown, teardown::handle(m, caller, payload)).await?),
        other => Err(WorkerError::Engine(format!(
            "{other} is not one of the worker's own functions"
        ))),
    }
}

/// Publishes the three functions, the inventory and `watch`, with their
/// schemas, the internal stats and the guest listener's auth function and
/// registration hook.
pub fn publish_all(bus: &dyn Bus, manager: &Arc<Manager>) {
    guest_auth::publish(bus, manager);
    guest_gate::publish(bus, manager);
    let stats = manager.stats();
    for spec in [run::spec(), register::spec(), teardown::spec()] {
        let (m, id) = (manager.clone(), spec.id.clone());
        let handler: Handler = Arc::new(move |p| {
            let (m, id) = (m.clone(), id.clone());
            Box::pin(async move { serve_as(&m, &Caller::Trusted, &id, p).await })
        });
        bus.publish(spec, handler);
    }

    bus.publish(
        list_runtimes::spec(),
        metered_handler(manager, stats.inventory.clone(), |m, p| async move {
            list_runtimes::handle(&m, p).await
        }),
    );

    let m = manager.clone();
    let watching: Handler = Arc::new(move |p| {
        let m = m.clone();
        Box::pin(async move { encode(watch::handle(&m, p).await?) })
    });
    bus.publish(watch::spec(), watching);

    let m = manager.clone();
    let stats: Handler = Arc::new(move |_p| {
        let m = m.clone();
        Box::pin(async move {
            let mut v = m.stats().to_json();
            v["pool_ready"] = serde_json::json!({
                "node": m.pool_ready(crate::ids::Lang::Node),
                "python": m.pool_ready(crate::ids::Lang::Python),
            });
            v["python_sdk"] = m.python_sdk().to_json();
            v["python_sdk"]["pool_ready_with_sdk"] = m.pool_ready_with_sdk().into();
            Ok(v)
        })
    });
    bus.publish(
        FunctionSpec {
            id: STATS.into(),
            description: Some(
                "Internal: sandbox::* calls and planted bytes per kind of operation.".into(),
            ),
            request_format: None,
            response_format: None,
            metadata: Some(serde_json::json!({"internal": true})),
        },
        stats,
    );
}

/// Publishes `ui-content` and binds it to the console's asset slots.
pub fn publish_ui(bus: &dyn Bus) {
    let handler: Handler = Arc::new(|p: Value| {
        Box::pin(async move {
            let path = p.get("path").and_then(Value::as_str).ok_or_else(|| {
                WorkerError::invalid("path", "is required (e.g. sandbox-code-runner/cards.js)")
            })?;
            let (content, content_type) = crate::ui::asset(path)
                .ok_or_else(|| WorkerError::invalid("path", format!("no such asset: {path:?}")))?;
            Ok(serde_json::json!({"content": content, "content_type": content_type}))
        })
    });
    bus.publish(
        FunctionSpec {
            id: UI_CONTENT.into(),
            description: Some(
                "Internal: the console cards of sandbox-code-runner (script and style).".into(),
            ),
            request_format: Some(serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"]
            })),
            response_format: Some(serde_json::json!({
                "type": "object",
                "properties": {"content": {"type": "string"}, "content_type": {"type": "string"}},
                "required": ["content", "content_type"]
            })),
            metadata: Some(serde_json::json!({"internal": true})),
        },
        handler,
    );
    for (slot, path) in [
        ("console:script", crate::ui::SCRIPT_PATH),
        ("console:style", crate::ui::STYLE_PATH),
        ("console:script", crate::ui::PAGE_PATH),
    ] {
        // Pending until a console declares the slot; a failure costs only the cards.
        match bus.bind(slot, UI_CONTENT, serde_json::json!({"path": path})) {
            Ok(_kept_for_the_process_lifetime) => {}
            Err(e) => tracing::warn!(slot, error = %e, "cannot bind a console asset slot"),
        }
    }
}

/// Every spec this worker publishes, for schema snapshots.
pub fn specs() -> Vec<FunctionSpec> {
    vec![
        run::spec(),
        register::spec(),
        teardown::spec(),
        list_runtimes::spec(),
        watch::spec(),
    ]
}
