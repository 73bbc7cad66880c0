//! The guest listener's engine-called hooks: `guest-auth` (the listener's
//! `auth_function_id`), `guest-register` (its
//! `on_function_registration_function_id`) and `guest-trigger` (its
//! `on_trigger_registration_function_id`). All are internal: hidden from
//! listings, forbidden to guests. The middleware is `guest_gate`.
//!
//! Each gathers the facts its decision needs (what the engine lists, who
//! serves a namespace) and hands them to `guest_access`, which decides by
//! `guest_policy`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bus::{Bus, BusError, FunctionSpec, Handler};
use crate::guest_access::{
    hook_function_id, GuestRefusal, GuestTokens, GUEST_AUTH, GUEST_REGISTER, GUEST_TRIGGER,
};
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
        let asked = listed(bus.as_ref(), Some("engine::")).await;
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        match asked {
            Ok(ids) => {
                let list = Arc::new(ids);
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

/// The function ids the engine lists, internals included (under `prefix`,
/// when one is given).
async fn listed(bus: &dyn Bus, prefix: Option<&str>) -> Result<Vec<String>, BusError> {
    let mut ask = json!({"include_internal": true});
    if let Some(p) = prefix {
        ask["prefix"] = p.into();
    }
    let answer = bus.call("engine::functions::list", ask, LOOKUP).await?;
    Ok(function_ids(&answer, prefix.unwrap_or_default()))
}

/// The registration hook's facts, from one listing of the engine: who owns
/// the namespace of the function (what the worker records; for a namespace
/// it records nothing of, whether anything listed lives there, another
/// worker's, a failed listing counting as taken), and whether the guest's
/// lineage stays within `guest_max_registrations`
/// (`GuestTokens::count_registration`, against what is listed now).
async fn admit_registration(m: &Manager, input: &Value) -> Result<Value, GuestRefusal> {
    let guest = GuestTokens::guest_of(input.get("context"))?;
    let function_id = hook_function_id(input);
    let listing = listed(m.bus().as_ref(), None).await.ok();
    let ns = policy::namespace_of(function_id);
    let owner = match m.guest_tokens().owner_of(ns) {
        NamespaceOwner::Free => {
            let prefix = format!("{ns}::");
            match &listing {
                Some(ids) if !ids.iter().any(|id| id.starts_with(&prefix)) => NamespaceOwner::Free,
                _ => NamespaceOwner::OtherWorker,
            }
        }
        owner => owner,
    };
    let admitted = m.guest_tokens().admit_registration(input, &owner)?;
    let listed: HashSet<String> = listing.unwrap_or_default().into_iter().collect();
    m.guest_tokens().count_registration(
        &guest.lineage,
        function_id,
        &listed,
        m.config().guest_max_registrations,
    )?;
    Ok(admitted)
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
            tokens.check_token(&input)?;
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
            Ok(admit_registration(&m, &input).await?)
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
                .owner_of(policy::namespace_of(hook_function_id(&input)));
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
