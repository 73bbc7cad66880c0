//! The guest listener's middleware (`guest-middleware`): every call guest
//! code makes arrives here first, with the auth context the engine keeps
//! for the guest's connection, and this worker decides what it may do.
//!
//! - `run`, `register_function` and `teardown` are served in-process as the
//!   guest's tenant ([`Caller::Guest`]): its lineage's budget, depth and
//!   ownership apply (`crate::tenancy`).
//! - Every other call is classified by what it touches and decided by
//!   `guest_policy`: the platform's functions and other tenants' are
//!   refused with `FORBIDDEN`; this worker's handlers are forwarded holding
//!   one of the tenant's call slots until the handler is done, whatever the
//!   routing; anything else is forwarded unchanged (payload, routing,
//!   namespace) and its answer, error code included, goes back as it came.
//!   The target then sees this worker as its caller, as on the real engine.
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
use crate::guest_policy::{self as policy, CallTarget, CallVerdict, NamespaceOwner};
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

/// What `function_id` (called in engine namespace `namespace`, `None` for
/// the default) touches, from what the worker records.
fn classify(m: &Manager, function_id: &str, namespace: Option<&str>) -> CallTarget {
    let ns = policy::namespace_of(function_id);
    if namespace.is_none() && OWN.contains(&function_id) {
        return CallTarget::WorkerOperation;
    }
    if policy::is_reserved(ns) {
        return CallTarget::Reserved;
    }
    let owner = m.guest_tokens().owner_of(ns);
    if namespace.is_none() && m.serves(function_id) {
        return CallTarget::Handler(owner);
    }
    match owner {
        NamespaceOwner::Lineage(l) => CallTarget::LineageFunction(l),
        _ => CallTarget::Elsewhere,
    }
}

/// The namespace whose runtime the calling guest runs in, if it is a
/// namespace runtime's (its token says so in the connection's context).
fn own_namespace(context: Option<&Value>) -> Option<&str> {
    context?.get("namespace")?.as_str()
}

/// One guest call, decided by `guest_policy` and carried out.
async fn gate(m: Arc<Manager>, bus: Arc<dyn Bus>, input: Value) -> Result<Value, WorkerError> {
    let input: MiddlewareInput = crate::wire::decode(input)?;
    let guest = GuestTokens::guest_of(input.context.as_ref())?;
    let routing = routing(input.action.as_ref())?;
    let namespace = input.namespace.filter(|ns| ns != "default");
    let target = classify(&m, &input.function_id, namespace.as_deref());
    let counted = match policy::decide_call(&guest.lineage, &target) {
        CallVerdict::Deny(why) => {
            return Err(WorkerError::Forbidden(format!(
                "function '{}' not allowed for guest code: {why}",
                input.function_id
            )))
        }
        CallVerdict::ServeAsTenant => {
            return serve_own(
                m,
                Caller::Guest(guest),
                input.function_id,
                input.payload,
                routing,
            )
            .await
        }
        CallVerdict::Forward { counted } => counted,
    };
    let budget = forward_budget(&m);
    if !counted {
        return bus
            .forward(
                &input.function_id,
                input.payload,
                routing,
                namespace.as_deref(),
                budget,
            )
            .await
            .map_err(WorkerError::Relayed);
    }
    // A call into this worker's handlers is served here, in-process, as
    // the guest's tenant: it holds one of its tenant's call slots for as
    // long as the handler works on it, whatever the routing (a void call is
    // awaited in the background, its slot held), and queues for the
    // runtime in its tenant's turn. A handler calling its own namespace is
    // a nested call: it never queues behind the slot it may itself hold.
    let permit = m.tenants().admit_call(&guest)?;
    let nested = own_namespace(input.context.as_ref())
        .is_some_and(|ns| ns == policy::namespace_of(&input.function_id));
    let forward = async move {
        let _permit = permit;
        let payload = crate::wire::HandlerPayload::decode(input.payload);
        let totals = m.stats().handler_call.clone();
        let call = m.invoke_for_guest(&input.function_id, payload, &guest.lineage, nested);
        Ok(crate::metering::metered(&totals, call).await?)
    };
    match routing {
        Routing::Wait => forward.await,
        Routing::Void => {
            tokio::spawn(forward);
            Ok(Value::Null)
        }
        // A queue's consumer would run it later, outside the tenant's bound.
        Routing::Enqueue { .. } => Err(WorkerError::invalid(
            "action",
            "guest code cannot enqueue calls to sandbox-code-runner's handlers; call them directly or void",
        )),
    }
}

/// One of the worker's own operations, served as the guest's tenant.
async fn serve_own(
    m: Arc<Manager>,
    caller: Caller,
    function_id: String,
    payload: Value,
    routing: Routing,
) -> Result<Value, WorkerError> {
    match routing {
        Routing::Wait => serve_as(&m, &caller, &function_id, payload).await,
        Routing::Void => {
            tokio::spawn(async move {
                if let Err(e) = serve_as(&m, &caller, &function_id, payload).await {
                    tracing::debug!(function_id = %function_id, code = %e.code(), "a guest's void call failed");
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
    }
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
