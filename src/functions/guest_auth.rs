//! The guest listener's engine-called hooks: `guest-auth` (the listener's
//! `auth_function_id`), `guest-register` (its
//! `on_function_registration_function_id`) and `guest-trigger` (its
//! `on_trigger_registration_function_id`). All are internal: hidden from
//! listings, forbidden to guests. The middleware is `guest_gate`.
//!
//! Each gathers the facts its decision needs (what the engine lists, who
//! serves a namespace) and hands them to `guest_access`, which decides by
//! `guest_policy`.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::guest_access::{GuestRefusal, GuestTokens, GUEST_AUTH, GUEST_REGISTER, GUEST_TRIGGER};
use crate::guest_policy::{self as policy, NamespaceOwner};
use crate::runtime::Manager;

/// How long the engine's list of builtins is reused. Builtins change only
/// when the engine does; the list is asked for again now and then so a
/// builtin added by an engine module at run time is forbidden too.
const BUILTINS_FRESH_FOR: Duration = Duration::from_secs(30);
/// How long one look-up on the engine may take inside a hook.
const LOOKUP: Duration = Duration::from_secs(5);

/// The engine's `engine::*` ids, as its `engine::functions::list` with
/// internals shows them, cached.
struct EngineBuiltins {
    bus: Weak<dyn Bus>,
    cached: Mutex<Option<(Instant, Arc<Vec<String>>)>>,
}

impl EngineBuiltins {
    /// The live list; on a failed look-up, the last one seen (or none: the
    /// policy's own list of known builtins still applies).
    async fn get(&self) -> Arc<Vec<String>> {
        if let Some((at, list)) = self
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            if at.elapsed() < BUILTINS_FRESH_FOR {
                return list.clone();
            }
        }
        let Some(bus) = self.bus.upgrade() else {
            return Arc::default();
        };
        let asked = bus
            .call(
                "engine::functions::list",
                json!({"include_internal": true, "prefix": "engine::"}),
                LOOKUP,
            )
            .await;
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        match asked {
            Ok(v) => {
                let list = Arc::new(function_ids(&v, "engine::"));
                *cached = Some((Instant::now(), list.clone()));
                list
            }
            Err(e) => {
                tracing::warn!(code = %e.code, "cannot list the engine's builtins; forbidding the known ones");
                cached.as_ref().map(|(_, l)| l.clone()).unwrap_or_default()
            }
        }
    }
}

/// The ids of an `engine::functions::list` answer that start with `prefix`.
fn function_ids(list: &Value, prefix: &str) -> Vec<String> {
    list.get("functions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.get("function_id").and_then(Value::as_str))
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Who owns the namespace of `function_id`: what the worker records, and
/// for a namespace it records nothing of, whether anything on the bus
/// lives there (another worker's). A failed look-up counts as taken.
async fn owner_of(m: &Manager, function_id: &str) -> NamespaceOwner {
    let ns = policy::namespace_of(function_id);
    let owner = m.guest_tokens().owner_of(ns);
    if owner != NamespaceOwner::Free {
        return owner;
    }
    let prefix = format!("{ns}::");
    let listed = m
        .bus()
        .call(
            "engine::functions::list",
            json!({"include_internal": true, "prefix": prefix}),
            LOOKUP,
        )
        .await;
    match listed {
        Ok(v) if function_ids(&v, &prefix).is_empty() => NamespaceOwner::Free,
        _ => NamespaceOwner::OtherWorker,
    }
}

/// Refuses a registration past `guest_max_registrations`, counted by
/// `GuestTokens::count_registration` against what the engine lists now.
async fn within_registrations(m: &Manager, input: &Value) -> Result<(), GuestRefusal> {
    let guest = GuestTokens::guest_of(input.get("context"))?;
    let listed = m
        .bus()
        .call(
            "engine::functions::list",
            json!({"include_internal": true}),
            LOOKUP,
        )
        .await
        .unwrap_or_default();
    let listed: std::collections::HashSet<String> = function_ids(&listed, "").into_iter().collect();
    m.guest_tokens().count_registration(
        &guest.lineage,
        function_id_of(input),
        &listed,
        m.config().guest_max_registrations,
    )
}

fn function_id_of(input: &Value) -> &str {
    input
        .get("function_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Publishes the three; they answer whether or not a guest listener is
/// set, so an operator's listener never refuses guests for a missing
/// function.
pub fn publish(bus: &dyn Bus, manager: &Arc<Manager>) {
    let builtins = Arc::new(EngineBuiltins {
        bus: Arc::downgrade(manager.bus()),
        cached: Mutex::new(None),
    });
    let tokens = manager.guest_tokens().clone();
    let auth: Handler = Arc::new(move |input| {
        let (tokens, builtins) = (tokens.clone(), builtins.clone());
        Box::pin(async move {
            // A forged or revoked token costs no look-up.
            tokens.authenticate(&input, &[])?;
            let live = builtins.get().await;
            Ok(tokens.authenticate(&input, &live)?)
        })
    });
    bus.publish(
        spec(
            GUEST_AUTH,
            "Internal: the guest listener's auth function (AuthInput → AuthResult).",
        ),
        auth,
    );
    let m = Arc::downgrade(manager);
    let hook: Handler = Arc::new(move |input| {
        let m = m.clone();
        Box::pin(async move {
            let m = m.upgrade().ok_or_else(stopping)?;
            let owner = owner_of(&m, function_id_of(&input)).await;
            let admitted = m.guest_tokens().admit_registration(&input, &owner)?;
            within_registrations(&m, &input).await?;
            Ok(admitted)
        })
    });
    bus.publish(
        spec(
            GUEST_REGISTER,
            "Internal: the guest listener's registration hook (guests register only in namespaces their tenant owns).",
        ),
        hook,
    );
    let m = Arc::downgrade(manager);
    let trigger: Handler = Arc::new(move |input| {
        let m = m.clone();
        Box::pin(async move {
            let m = m.upgrade().ok_or_else(stopping)?;
            let owner = m
                .guest_tokens()
                .owner_of(policy::namespace_of(function_id_of(&input)));
            let hub = m.events().clone();
            Ok(m.guest_tokens().admit_trigger(
                &input,
                &owner,
                |l| hub.scoped_to(l),
                m.config().guest_max_subscriptions,
            )?)
        })
    });
    bus.publish(
        spec(
            GUEST_TRIGGER,
            "Internal: the guest listener's trigger-registration hook (guests bind only lifecycle events, scoped to their tenant, to their own functions).",
        ),
        trigger,
    );
}

fn stopping() -> crate::error::WorkerError {
    crate::error::WorkerError::Engine("the worker is stopping".into())
}

fn spec(id: &str, description: &str) -> FunctionSpec {
    FunctionSpec {
        id: id.into(),
        description: Some(description.into()),
        request_format: None,
        response_format: None,
        metadata: Some(json!({"internal": true})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_yields_the_ids_under_its_prefix() {
        let listed = json!({"functions": [
            {"function_id": "engine::functions::list"},
            {"function_id": "app::f"},
            {"function_id": "engine::brand_new"},
            {"nothing": true}
        ]});
        assert_eq!(
            function_ids(&listed, "engine::"),
            vec!["engine::functions::list", "engine::brand_new"]
        );
        assert!(function_ids(&json!({}), "engine::").is_empty());
    }
}
