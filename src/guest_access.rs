//! Guest access through the engine's RBAC listener.
//!
//! Guest code is untrusted, yet its `iii` is a worker connection. When the
//! operator opens a guest listener (an `iii-worker-manager` entry with an
//! `rbac` block whose `auth_function_id` is [`GUEST_AUTH`]), every guest
//! connects there with a fresh token of its run or runtime in the query
//! string, and this module is what the engine asks:
//!
//! - [`GUEST_AUTH`] maps a token to a policy: the daemon's `sandbox::*`
//!   contract and this worker's internal functions are forbidden, the rest
//!   is left to the operator's `expose_functions`. An unknown or revoked
//!   token throws, and the engine refuses the connection.
//! - [`GUEST_REGISTER`] is the listener's registration hook: a guest cannot
//!   register under `sandbox::`, `sandbox-code-runner::`, or a namespace
//!   another runtime of this worker holds. The hook is used rather than a
//!   `function_registration_prefix` because a prefix renames what the guest
//!   registers (`mine::f` becomes `<prefix>::mine::f`), so a run could no
//!   longer trigger its own registration by the id it registered.
//!
//! Tokens are capabilities like runtime ids: `Debug` redacts them, nothing
//! logs them, and a [`TokenLease`] revokes its token when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::WorkerError;
use crate::ids::OWN_NAMESPACE;

/// The listener's `auth_function_id`.
pub const GUEST_AUTH: &str = "sandbox-code-runner::guest-auth";
/// The listener's `on_function_registration_function_id`.
pub const GUEST_REGISTER: &str = "sandbox-code-runner::guest-register";

/// The env var that carries a guest's token into each exec. The wrappers
/// append it to `III_URL` as `?token=`; it is never set at VM creation
/// (pooled VMs are created before they have a tenant).
pub(crate) const TOKEN_ENV: &str = "III_GUEST_TOKEN";

/// Every function of the iii-sandbox daemon's contract. All of them act on
/// any sandbox by id, so none may be reached from inside one.
pub(crate) const SANDBOX_CONTRACT: &[&str] = &[
    "sandbox::create",
    "sandbox::exec",
    "sandbox::run",
    "sandbox::stop",
    "sandbox::list",
    "sandbox::catalog::list",
    "sandbox::fs::write",
    "sandbox::fs::read",
    "sandbox::fs::ls",
    "sandbox::fs::stat",
    "sandbox::fs::mkdir",
    "sandbox::fs::rm",
    "sandbox::fs::mv",
    "sandbox::fs::chmod",
    "sandbox::fs::grep",
    "sandbox::fs::sed",
];

/// This worker's internal functions, and the operator's inventory: plumbing
/// and fleet views that guests have no business calling (the inventory names
/// other tenants' namespaces and functions).
pub const INTERNAL_FUNCTIONS: &[&str] = &[
    GUEST_AUTH,
    GUEST_REGISTER,
    crate::functions::LIST_RUNTIMES,
    crate::functions::STATS,
    crate::functions::UI_CONTENT,
    crate::settings::GUIDANCE_FN,
    crate::settings::ON_CHANGE_FN,
];

/// Namespaces no guest may register in.
const RESERVED_NAMESPACES: &[&str] = &["sandbox", OWN_NAMESPACE];

/// What a token grants beyond the common policy.
#[derive(Debug, Clone, Default)]
struct Grant {
    /// The namespace the holder's runtime serves (`register_function`
    /// runtimes), which its guests may also register ephemeral functions in.
    namespace: Option<String>,
}

/// The live tokens. Cheap to share.
#[derive(Default)]
pub struct GuestTokens {
    live: Mutex<HashMap<String, Grant>>,
    /// Namespaces held by this worker's runtimes, with how many hold each.
    held: Mutex<HashMap<String, usize>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A live token; revoked when dropped.
pub struct TokenLease {
    token: String,
    tokens: Arc<GuestTokens>,
}

impl TokenLease {
    /// The secret, for the one exec env that carries it.
    pub fn expose(&self) -> &str {
        &self.token
    }
}

impl std::fmt::Debug for TokenLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenLease(<redacted>)")
    }
}

impl Drop for TokenLease {
    fn drop(&mut self) {
        lock(&self.tokens.live).remove(&self.token);
    }
}

/// Why a guest connection or registration is refused.
#[derive(Debug, thiserror::Error)]
pub enum GuestRefusal {
    #[error("`query_params.token`: is missing")]
    NoToken,
    #[error("`query_params.token`: is unknown or revoked")]
    UnknownToken,
    #[error("`function_id`: namespace `{0}` is reserved")]
    Reserved(String),
    #[error("`function_id`: namespace `{0}` belongs to another runtime")]
    Taken(String),
}

impl From<GuestRefusal> for WorkerError {
    fn from(r: GuestRefusal) -> WorkerError {
        WorkerError::InvalidRequest(r.to_string())
    }
}

impl GuestTokens {
    pub fn new() -> Arc<GuestTokens> {
        Arc::new(GuestTokens::default())
    }

    /// A fresh 256-bit token for one run or runtime; `namespace` is the one
    /// its runtime serves, if any.
    pub fn mint(self: &Arc<Self>, namespace: Option<&str>) -> TokenLease {
        let bytes: [u8; 32] = rand::random();
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        lock(&self.live).insert(
            token.clone(),
            Grant {
                namespace: namespace.map(str::to_string),
            },
        );
        TokenLease {
            token,
            tokens: self.clone(),
        }
    }

    /// Number of live tokens (for tests and leak checks).
    pub fn live(&self) -> usize {
        lock(&self.live).len()
    }

    /// Records that a runtime of this worker serves `namespace`.
    pub fn hold(&self, namespace: &str) {
        *lock(&self.held).entry(namespace.to_string()).or_default() += 1;
    }

    /// Undoes one [`GuestTokens::hold`].
    pub fn release(&self, namespace: &str) {
        let mut held = lock(&self.held);
        if let Some(n) = held.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                held.remove(namespace);
            }
        }
    }

    /// The AuthResult for an AuthInput, or why the connection is refused.
    pub fn authenticate(&self, input: &Value) -> Result<Value, GuestRefusal> {
        let token = input
            .get("query_params")
            .and_then(|q| q.get("token"))
            .and_then(Value::as_array)
            .and_then(|v| v.first())
            .and_then(Value::as_str)
            .ok_or(GuestRefusal::NoToken)?;
        let grant = lock(&self.live)
            .get(token)
            .cloned()
            .ok_or(GuestRefusal::UnknownToken)?;
        let forbidden: Vec<&str> = SANDBOX_CONTRACT
            .iter()
            .chain(INTERNAL_FUNCTIONS)
            .copied()
            .collect();
        Ok(json!({
            "allowed_functions": [],
            "forbidden_functions": forbidden,
            "allow_function_registration": true,
            "allow_trigger_type_registration": false,
            "context": { "namespace": grant.namespace },
        }))
    }

    /// The registration hook: `{}` (keep everything) or a refusal.
    pub fn admit_registration(&self, input: &Value) -> Result<Value, GuestRefusal> {
        let id = input
            .get("function_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let namespace = id.split_once("::").map(|(ns, _)| ns).unwrap_or(id);
        if RESERVED_NAMESPACES.contains(&namespace) {
            return Err(GuestRefusal::Reserved(namespace.to_string()));
        }
        let own = input
            .get("context")
            .and_then(|c| c.get("namespace"))
            .and_then(Value::as_str);
        if own != Some(namespace) && lock(&self.held).contains_key(namespace) {
            return Err(GuestRefusal::Taken(namespace.to_string()));
        }
        Ok(json!({}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn input(token: &str) -> Value {
        json!({"headers": {}, "ip_address": "127.0.0.1", "query_params": {"token": [token]}})
    }

    #[test]
    fn a_minted_token_authenticates_until_its_lease_drops() {
        let tokens = GuestTokens::new();
        let lease = tokens.mint(None);
        let policy = tokens.authenticate(&input(lease.expose())).unwrap();
        let forbidden = policy["forbidden_functions"].as_array().unwrap();
        for f in SANDBOX_CONTRACT.iter().chain(INTERNAL_FUNCTIONS) {
            assert!(forbidden.contains(&json!(f)), "{f} not forbidden");
        }
        for public in [
            "sandbox-code-runner::run",
            "sandbox-code-runner::register_function",
            "sandbox-code-runner::teardown",
        ] {
            assert!(!forbidden.contains(&json!(public)), "{public} forbidden");
        }
        let secret = lease.expose().to_string();
        drop(lease);
        assert!(matches!(
            tokens.authenticate(&input(&secret)),
            Err(GuestRefusal::UnknownToken)
        ));
        assert_eq!(tokens.live(), 0);
    }

    #[test]
    fn tokens_are_fresh_and_never_printed() {
        let tokens = GuestTokens::new();
        let (a, b) = (tokens.mint(None), tokens.mint(None));
        assert_ne!(a.expose(), b.expose());
        assert!(a.expose().len() >= 43);
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[rstest]
    #[case(json!({"headers": {}, "query_params": {}}))]
    #[case(json!({"headers": {}, "query_params": {"token": []}}))]
    #[case(input("forged"))]
    fn missing_or_unknown_tokens_are_refused(#[case] i: Value) {
        assert!(GuestTokens::new().authenticate(&i).is_err());
    }

    #[rstest]
    #[case("sandbox::exec", None, false)]
    #[case("sandbox-code-runner::run", None, false)]
    #[case("billing::charge", None, false)]
    #[case("billing::tmp", Some("billing"), true)]
    #[case("mine::f", None, true)]
    #[case("mine::f", Some("billing"), true)]
    fn registrations_stay_out_of_reserved_and_held_namespaces(
        #[case] id: &str,
        #[case] own: Option<&str>,
        #[case] ok: bool,
    ) {
        let tokens = GuestTokens::new();
        tokens.hold("billing");
        let got =
            tokens.admit_registration(&json!({"function_id": id, "context": {"namespace": own}}));
        assert_eq!(got.is_ok(), ok, "{id}: {got:?}");
        tokens.release("billing");
        assert!(tokens
            .admit_registration(&json!({"function_id": "billing::x", "context": {}}))
            .is_ok());
    }
}
