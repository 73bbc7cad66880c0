//! The guest listener's two engine-called functions: `guest-auth` (the
//! listener's `auth_function_id`) and `guest-register` (its
//! `on_function_registration_function_id`). Both are internal: hidden from
//! listings, forbidden to guests.

use std::sync::Arc;

use serde_json::json;

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::guest_access::{GUEST_AUTH, GUEST_REGISTER};
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
