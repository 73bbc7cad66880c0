//! The guest listener's engine-called hooks: `guest-auth` (the listener's
//! `auth_function_id`), `guest-register` (its
//! `on_function_registration_function_id`) and `guest-trigger` (its
//! `on_trigger_registration_function_id`). All are internal: hidden from
//! listings, forbidden to guests. The middleware is `guest_gate`.

use std::sync::Arc;

use serde_json::json;

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::guest_access::{GUEST_AUTH, GUEST_REGISTER, GUEST_TRIGGER};
use crate::runtime::Manager;

/// Publishes both; they answer whether or not a guest listener is set, so
/// an operator's listener never refuses guests for a missing function.
pub fn publish(bus: &dyn Bus, manager: &Arc<Manager>) {
    let tokens = manager.guest_tokens().clone();
    let auth: Handler = Arc::new(move |input| {
        let tokens = tokens.clone();
        Box::pin(async move { Ok(tokens.authenticate(&input)?) })
    });
    bus.publish(
        spec(
            GUEST_AUTH,
            "Internal: the guest listener's auth function (AuthInput → AuthResult).",
        ),
        auth,
    );
    let tokens = manager.guest_tokens().clone();
    let hook: Handler = Arc::new(move |input| {
        let tokens = tokens.clone();
        Box::pin(async move { Ok(tokens.admit_registration(&input)?) })
    });
    bus.publish(
        spec(
            GUEST_REGISTER,
            "Internal: the guest listener's registration hook (keeps guests out of reserved and held namespaces).",
        ),
        hook,
    );
    let tokens = manager.guest_tokens().clone();
    let trigger: Handler = Arc::new(move |input| {
        let tokens = tokens.clone();
        Box::pin(async move { Ok(tokens.admit_trigger(&input)?) })
    });
    bus.publish(
        spec(
            GUEST_TRIGGER,
            "Internal: the guest listener's trigger-registration hook (scopes lifecycle subscriptions to the guest's tenant).",
        ),
        trigger,
    );
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
