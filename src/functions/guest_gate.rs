//! The guest listener's middleware (`guest-middleware`): every call guest
//! code makes arrives here first, with the auth context the engine keeps
//! for the guest's connection, and this worker decides what it may do.
//!
//! - `run`, `register_function` and `teardown` are served in-process as the
//!   guest's tenant ([`Caller::Guest`]): its lineage's budget, depth and
//!   ownership apply (`crate::tenancy`).
//! - Every other call is forwarded unchanged (payload, routing, namespace)
//!   and its answer, error code included, goes back as it came. The target
//!   then sees this worker as its caller, as on the real engine.
//!
//! The engine consults the middleware only after its own RBAC decision, so a
//! function the auth result forbids never gets here; it skips the
//! middleware for its own `engine::*` built-ins.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{serve_as, OWN};
use crate::bus::{Bus, FunctionSpec, Handler, Routing};
use crate::error::WorkerError;
use crate::guest_access::{GuestTokens, GUEST_MIDDLEWARE};
use crate::runtime::Manager;
use crate::tenancy::Caller;

/// What the engine hands its listener's middleware.
#[derive(Debug, Deserialize)]
struct MiddlewareInput {
    function_id: String,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    action: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    namespace: Option<String>,
}

/// How long a forwarded call may take: no guest outlives its exec, whose
/// budget never exceeds `max_timeout_ms`.
fn forward_budget(m: &Manager) -> Duration {
    Duration::from_millis(m.config().max_timeout_ms.saturating_add(1_000))
}

/// The routing a guest asked for.
fn routing(action: Option<&Value>) -> Result<Routing, WorkerError> {
    let Some(a) = action.filter(|a| !a.is_null()) else {
        return Ok(Routing::Wait);
    };
    match a.get("type").and_then(Value::as_str) {
        Some("void") => Ok(Routing::Void),
        Some("enqueue") => {
            let queue = a.get("queue").and_then(Value::as_str).ok_or_else(|| {
                WorkerError::invalid("action.queue", "is required for an enqueue")
            })?;
            Ok(Routing::Enqueue {
                queue: queue.to_string(),
            })
        }
        other => Err(WorkerError::invalid(
            "action.type",
            format!("unknown routing {other:?} (void or enqueue)"),
        )),
    }
}

/// One guest call, decided.
async fn gate(m: Arc<Manager>, bus: Arc<dyn Bus>, input: Value) -> Result<Value, WorkerError> {
    let input: MiddlewareInput = crate::wire::decode(input)?;
    let guest = GuestTokens::guest_of(input.context.as_ref())?;
    let routing = routing(input.action.as_ref())?;
    let namespace = input.namespace.filter(|ns| ns != "default");
    let own = namespace.is_none() && OWN.contains(&input.function_id.as_str());
    if own {
        let caller = Caller::Guest(guest);
        return match routing {
            Routing::Wait => serve_as(&m, &caller, &input.function_id, input.payload).await,
            Routing::Void => {
                let id = input.function_id;
                tokio::spawn(async move {
                    if let Err(e) = serve_as(&m, &caller, &id, input.payload).await {
                        tracing::debug!(function_id = %id, code = %e.code(), "a guest's void call failed");
                    }
                });
                Ok(Value::Null)
            }
            // A queue's consumer would call it as a trusted caller, outside
            // the tenant's budget and ownership.
            Routing::Enqueue { .. } => Err(WorkerError::invalid(
                "action",
                "guest code cannot enqueue sandbox-code-runner's functions; call them directly",
            )),
        };
    }
    // A tenant's calls queued on this worker's handlers are bounded, so it
    // cannot stall another tenant's calls behind its own.
    let _in_flight = if namespace.is_none() && m.serves(&input.function_id) {
        Some(m.tenants().admit_call(&guest)?)
    } else {
        None
    };
    let budget = forward_budget(&m);
    bus.forward(
        &input.function_id,
        input.payload,
        routing,
        namespace.as_deref(),
        budget,
    )
    .await
    .map_err(WorkerError::Relayed)
}

/// Publishes the middleware. Like `guest-auth`, it answers whether or not a
/// guest listener uses it.
pub fn publish(bus: &dyn Bus, manager: &Arc<Manager>) {
    let m = manager.clone();
    let handler: Handler = Arc::new(move |input| {
        let m = m.clone();
        let bus = m.bus().clone();
        Box::pin(gate(m, bus, input))
    });
    bus.publish(
        FunctionSpec {
            id: GUEST_MIDDLEWARE.into(),
            description: Some(
                "Internal: the guest listener's middleware (tenancy for guest calls).".into(),
            ),
            request_format: None,
            response_format: None,
            metadata: Some(json!({"internal": true})),
        },
        handler,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(None, Some(Routing::Wait))]
    #[case(Some(Value::Null), Some(Routing::Wait))]
    #[case(Some(json!({"type": "void"})), Some(Routing::Void))]
    #[case(Some(json!({"type": "enqueue", "queue": "q"})), Some(Routing::Enqueue { queue: "q".into() }))]
    #[case(Some(json!({"type": "enqueue"})), None)]
    #[case(Some(json!({"type": "later"})), None)]
    fn a_guests_action_becomes_its_routing(
        #[case] action: Option<Value>,
        #[case] want: Option<Routing>,
    ) {
        assert_eq!(routing(action.as_ref()).ok(), want);
    }
}
