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
//!   another runtime of this worker holds (unless its own lineage owns it).
//!   The hook is used rather than a `function_registration_prefix` because a
//!   prefix renames what the guest registers (`mine::f` becomes
//!   `<prefix>::mine::f`), so a run could no longer trigger its own
//!   registration by the id it registered.
//! - [`GUEST_TRIGGER`] is the listener's trigger-registration hook: a
//!   guest's subscription to the lifecycle events is scoped to its own
//!   lineage (the hook writes the lineage into the binding's config, over
//!   anything the guest put there); other trigger types pass unchanged.
//! - The auth context carries the token's lineage and depth
//!   ([`crate::tenancy`]); the listener's middleware (`functions::guest_gate`)
//!   reads them back on every guest call.
//!
//! Tokens are capabilities like runtime ids: `Debug` redacts them, nothing
//! logs them, and a [`TokenLease`] revokes its token when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::WorkerError;
use crate::function_ids as ids;
use crate::ids::OWN_NAMESPACE;
use crate::tenancy::{Guest, Lineage};

pub use crate::function_ids::{GUEST_AUTH, GUEST_MIDDLEWARE, GUEST_REGISTER, GUEST_TRIGGER};

/// The config key of a lifecycle subscription that the trigger hook scopes
/// to one lineage. Whatever a guest writes there is overwritten.
pub(crate) const SCOPE_KEY: &str = "_lineage";

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
    GUEST_MIDDLEWARE,
    GUEST_TRIGGER,
    ids::LIST_RUNTIMES,
    ids::STATS,
    ids::UI_CONTENT,
    ids::GUIDANCE_FN,
    ids::ON_CHANGE_FN,
];

/// The engine's own functions that act outside a guest's connection and
/// skip the listener's middleware and hooks: `engine::register_trigger`
/// makes a durable binding the trigger hook never sees (an unscoped
/// lifecycle subscription that outlives the guest), and
/// `engine::unregister_trigger` removes anyone's binding by id. A guest's
/// SDK binds through its connection, which the hook scopes.
pub(crate) const ENGINE_BYPASSES: &[&str] =
    &["engine::register_trigger", "engine::unregister_trigger"];

/// Namespaces no guest may register in.
const RESERVED_NAMESPACES: &[&str] = &["sandbox", OWN_NAMESPACE];

/// What a token grants beyond the common policy.
#[derive(Debug, Clone)]
struct Grant {
    /// The namespace the holder's runtime serves (`register_function`
    /// runtimes), which its guests may also register ephemeral functions in.
    namespace: Option<String>,
    /// The tenant its guests belong to, and the depth their code runs at.
    lineage: Lineage,
    depth: u32,
}

/// A namespace held by this worker's runtimes: how many, and the lineage
/// that owns it (none when a trusted caller created it).
#[derive(Debug, Clone)]
struct Held {
    runtimes: usize,
    owner: Option<Lineage>,
}

/// The namespace of a hook input's `function_id`, unless it is one no guest
/// may register in or aim a binding at.
fn unreserved_namespace(input: &Value) -> Result<&str, GuestRefusal> {
    let id = input
        .get("function_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = id.split_once("::").map_or(id, |(ns, _)| ns);
    if RESERVED_NAMESPACES.contains(&namespace) {
        return Err(GuestRefusal::Reserved(namespace.to_string()));
    }
    Ok(namespace)
}

/// The live tokens. Cheap to share.
#[derive(Default)]
pub struct GuestTokens {
    live: Mutex<HashMap<String, Grant>>,
    held: Mutex<HashMap<String, Held>>,
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
    #[error("`context.lineage`: missing; this listener's auth function must be {GUEST_AUTH}")]
    NoLineage,
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
    /// its runtime serves, if any; its guests belong to `lineage` and run at
    /// `depth`.
    pub fn mint(
        self: &Arc<Self>,
        namespace: Option<&str>,
        lineage: &Lineage,
        depth: u32,
    ) -> TokenLease {
        let bytes: [u8; 32] = rand::random();
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        lock(&self.live).insert(
            token.clone(),
            Grant {
                namespace: namespace.map(str::to_string),
                lineage: lineage.clone(),
                depth,
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

    /// Records that a runtime of this worker serves `namespace`; the first
    /// holder's `owner` owns it.
    pub fn hold(&self, namespace: &str, owner: Option<&Lineage>) {
        lock(&self.held)
            .entry(namespace.to_string())
            .or_insert_with(|| Held {
                runtimes: 0,
                owner: owner.cloned(),
            })
            .runtimes += 1;
    }

    /// Undoes one [`GuestTokens::hold`].
    pub fn release(&self, namespace: &str) {
        let mut held = lock(&self.held);
        if let Some(h) = held.get_mut(namespace) {
            h.runtimes -= 1;
            if h.runtimes == 0 {
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
            .chain(ENGINE_BYPASSES)
            .copied()
            .collect();
        Ok(json!({
            "allowed_functions": [],
            "forbidden_functions": forbidden,
            "allow_function_registration": true,
            "allow_trigger_type_registration": false,
            "context": {
                "namespace": grant.namespace,
                "lineage": grant.lineage.as_str(),
                "depth": grant.depth,
            },
        }))
    }

    /// The guest a middleware or hook call speaks for, from the auth context
    /// this worker issued. A context without a lineage is refused: the
    /// listener is then not gated by this worker's auth function.
    pub fn guest_of(context: Option<&Value>) -> Result<Guest, GuestRefusal> {
        let c = context.ok_or(GuestRefusal::NoLineage)?;
        let lineage = c
            .get("lineage")
            .and_then(Value::as_str)
            .ok_or(GuestRefusal::NoLineage)?;
        let depth = c.get("depth").and_then(Value::as_u64).unwrap_or(0);
        Ok(Guest {
            lineage: Lineage::from_context(lineage),
            depth: u32::try_from(depth).unwrap_or(u32::MAX),
        })
    }

    /// The trigger-registration hook: a lifecycle subscription is scoped to
    /// the guest's lineage; any other binding passes unchanged (`{}`).
    /// A binding that would let a trusted trigger provider call the
    /// daemon or this worker for the guest is refused outright.
    pub fn admit_trigger(&self, input: &Value) -> Result<Value, GuestRefusal> {
        unreserved_namespace(input)?;
        if input.get("trigger_type").and_then(Value::as_str) != Some(ids::EVENT_TRIGGER_TYPE) {
            return Ok(json!({}));
        }
        let guest = GuestTokens::guest_of(input.get("context"))?;
        let mut config = match input.get("config") {
            Some(Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        };
        config.insert(SCOPE_KEY.into(), guest.lineage.as_str().into());
        Ok(json!({ "config": config }))
    }

    /// The registration hook: `{}` (keep everything) or a refusal.
    pub fn admit_registration(&self, input: &Value) -> Result<Value, GuestRefusal> {
        let namespace = unreserved_namespace(input)?;
        let context = input.get("context");
        let own = context
            .and_then(|c| c.get("namespace"))
            .and_then(Value::as_str);
        let lineage = context
            .and_then(|c| c.get("lineage"))
            .and_then(Value::as_str);
        if own == Some(namespace) {
            return Ok(json!({}));
        }
        match lock(&self.held).get(namespace) {
            Some(h) if h.owner.is_none() || h.owner.as_ref().map(Lineage::as_str) != lineage => {
                Err(GuestRefusal::Taken(namespace.to_string()))
            }
            _ => Ok(json!({})),
        }
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
        let lease = tokens.mint(None, &Lineage::fresh(), 0);
        let policy = tokens.authenticate(&input(lease.expose())).unwrap();
        let forbidden = policy["forbidden_functions"].as_array().unwrap();
        for f in SANDBOX_CONTRACT
            .iter()
            .chain(INTERNAL_FUNCTIONS)
            .chain(ENGINE_BYPASSES)
        {
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
        let (a, b) = (
            tokens.mint(None, &Lineage::fresh(), 0),
            tokens.mint(None, &Lineage::fresh(), 0),
        );
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
        tokens.hold("billing", None);
        let got =
            tokens.admit_registration(&json!({"function_id": id, "context": {"namespace": own}}));
        assert_eq!(got.is_ok(), ok, "{id}: {got:?}");
        tokens.release("billing");
        assert!(tokens
            .admit_registration(&json!({"function_id": "billing::x", "context": {}}))
            .is_ok());
    }
    #[test]
    fn the_auth_context_carries_the_lineage_and_depth_and_reads_back() {
        let tokens = GuestTokens::new();
        let l = Lineage::fresh();
        let lease = tokens.mint(Some("app"), &l, 2);
        let policy = tokens.authenticate(&input(lease.expose())).unwrap();
        let guest = GuestTokens::guest_of(Some(&policy["context"])).unwrap();
        assert_eq!((guest.lineage, guest.depth), (l, 2));
        assert_eq!(policy["context"]["namespace"], "app");
        assert!(matches!(
            GuestTokens::guest_of(Some(&json!({"namespace": "app"}))),
            Err(GuestRefusal::NoLineage)
        ));
        assert!(GuestTokens::guest_of(None).is_err());
    }

    #[test]
    fn a_lineage_may_register_in_the_namespaces_it_owns_only() {
        let tokens = GuestTokens::new();
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        tokens.hold("mine", Some(&a));
        tokens.hold("ops", None);
        let reg = |id: &str, l: &Lineage| {
            tokens.admit_registration(&json!({
                "function_id": id,
                "context": {"lineage": l.as_str(), "depth": 1, "namespace": null}
            }))
        };
        assert!(reg("mine::f", &a).is_ok());
        assert!(matches!(reg("mine::f", &b), Err(GuestRefusal::Taken(_))));
        assert!(matches!(reg("ops::f", &a), Err(GuestRefusal::Taken(_))));
        assert!(reg("fresh::f", &b).is_ok());
    }

    #[test]
    fn lifecycle_subscriptions_are_scoped_to_the_guests_lineage() {
        let tokens = GuestTokens::new();
        let l = Lineage::fresh();
        let hook = |trigger_type: &str, config: Value| {
            tokens.admit_trigger(&json!({
                "trigger_id": "t", "trigger_type": trigger_type, "function_id": "g::sink",
                "config": config, "metadata": null, "namespace": "default",
                "context": {"lineage": l.as_str(), "depth": 0, "namespace": null}
            }))
        };
        let forged = hook(
            ids::EVENT_TRIGGER_TYPE,
            json!({"events": ["runtime.created"], SCOPE_KEY: "ln-someone-else"}),
        )
        .unwrap();
        assert_eq!(forged["config"][SCOPE_KEY], l.as_str());
        assert_eq!(forged["config"]["events"], json!(["runtime.created"]));
        assert_eq!(
            hook(ids::EVENT_TRIGGER_TYPE, Value::Null).unwrap()["config"][SCOPE_KEY],
            l.as_str()
        );
        assert_eq!(
            hook("cron", json!({"expression": "* * * * *"})).unwrap(),
            json!({})
        );
        let aimed_at_the_worker = tokens.admit_trigger(&json!({
            "trigger_type": "http", "function_id": "sandbox-code-runner::run",
            "config": {}, "context": {"lineage": l.as_str()}
        }));
        assert!(matches!(
            aimed_at_the_worker,
            Err(GuestRefusal::Reserved(_))
        ));
        assert!(tokens
            .admit_trigger(&json!({"trigger_type": ids::EVENT_TRIGGER_TYPE, "context": {}}))
            .is_err());
    }
}
