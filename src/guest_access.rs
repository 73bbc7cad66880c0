//! Guest access through the engine's RBAC listener.
//!
//! Guest code is untrusted, yet its `iii` is a worker connection. When the
//! operator opens a guest listener (an `iii-worker-manager` entry with an
//! `rbac` block whose `auth_function_id` is [`GUEST_AUTH`]), every guest
//! connects there with a fresh token of its run or runtime in the query
//! string, and this module is what the engine asks:
//!
//! - [`GUEST_AUTH`] maps a token to a policy: the daemon's `sandbox::*`
//!   contract, this worker's internal functions and every engine builtin
//!   but `guest_policy`'s allowlist are forbidden (builtins skip the
//!   middleware, so this is their only gate); only the lifecycle trigger
//!   type may be bound. An unknown or revoked token throws, and the engine
//!   refuses the connection.
//! - [`GUEST_REGISTER`] is the listener's registration hook: a guest
//!   registers only into a namespace its lineage owns, or a free one, which
//!   its lineage then claims until its last token is revoked. The hook is
//!   used rather than a `function_registration_prefix` because a prefix
//!   renames what the guest registers (`mine::f` becomes
//!   `<prefix>::mine::f`), so a run could no longer trigger its own
//!   registration by the id it registered.
//! - [`GUEST_TRIGGER`] is the listener's trigger-registration hook: a
//!   guest's lifecycle subscription must aim at one of its own functions, is
//!   scoped to its own lineage (the hook writes the lineage into the
//!   binding's config, over anything the guest put there), and is bounded.
//! - The auth context carries the token's lineage and depth
//!   ([`crate::tenancy`]); the listener's middleware (`functions::guest_gate`)
//!   reads them back on every guest call.
//!
//! What is allowed is decided in [`crate::guest_policy`]; this module
//! gathers who owns what and answers the engine.
//!
//! Tokens are capabilities like runtime ids: `Debug` redacts them, nothing
//! logs them, and a [`TokenLease`] revokes its token when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::WorkerError;
use crate::function_ids as ids;
use crate::guest_policy::{self as policy, NamespaceOwner, RegistrationVerdict};
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

/// This worker's internal functions, the operator's inventory and `watch`:
/// plumbing and views that guests have no business calling (the inventory
/// names other tenants' namespaces and functions; a guest holds no channel,
/// so it has no writer ref to watch).
pub const INTERNAL_FUNCTIONS: &[&str] = &[
    GUEST_AUTH,
    GUEST_REGISTER,
    GUEST_MIDDLEWARE,
    GUEST_TRIGGER,
    ids::LIST_RUNTIMES,
    ids::WATCH,
    ids::STATS,
    ids::UI_CONTENT,
    ids::GUIDANCE_FN,
    ids::ON_CHANGE_FN,
];

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

/// The function id a hook's input names (empty when it names none).
pub fn hook_function_id(input: &Value) -> &str {
    input
        .get("function_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether a hook's function lies in the namespace the guest's own
/// namespace runtime serves (its auth context's `namespace`).
fn in_own_namespace(input: &Value) -> bool {
    let own = input
        .get("context")
        .and_then(|c| c.get("namespace"))
        .and_then(Value::as_str);
    own.is_some() && own == Some(policy::namespace_of(hook_function_id(input)))
}

/// The live tokens, and who owns which namespace. Cheap to share.
#[derive(Default)]
pub struct GuestTokens {
    live: Mutex<HashMap<String, Grant>>,
    held: Mutex<HashMap<String, Held>>,
    /// Namespaces a lineage took by registering there on its own
    /// connection, kept until its last token is revoked.
    claims: Mutex<HashMap<String, Lineage>>,
    /// The functions each lineage's guests registered on their own
    /// connections, with when the hook admitted them.
    registered: Mutex<HashMap<Lineage, Vec<(String, std::time::Instant)>>>,
}

/// How long an admitted registration counts even if the engine does not
/// list it yet (the engine holds a connection's registrations back until it
/// names itself, or 5 s).
const NOT_LISTED_YET: std::time::Duration = std::time::Duration::from_secs(10);

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
        let mut live = lock(&self.tokens.live);
        let Some(gone) = live.remove(&self.token) else {
            return;
        };
        // A lineage with no live token has no guest left to use its claims.
        if !live.values().any(|g| g.lineage == gone.lineage) {
            lock(&self.tokens.claims).retain(|_, l| *l != gone.lineage);
            lock(&self.tokens.registered).remove(&gone.lineage);
        }
    }
}

/// Why a guest connection or registration is refused.
#[derive(Debug, thiserror::Error)]
pub enum GuestRefusal {
    #[error("`query_params.token`: is missing")]
    NoToken,
    #[error("`query_params.token`: is unknown or revoked")]
    UnknownToken,
    #[error("`function_id`: namespace `{0}` belongs to {1}")]
    Taken(String, &'static str),
    #[error("`trigger_type`: {0}")]
    Binding(&'static str),
    #[error("this tenant already has {0} lifecycle subscriptions (guest_max_subscriptions)")]
    Subscriptions(usize),
    #[error(
        "this tenant already has {0} functions registered by its guest code (guest_max_registrations)"
    )]
    Registrations(usize),
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

    /// Whether an AuthInput carries a live token, or why not. Cheap:
    /// `guest-auth` asks it before looking anything up on the engine.
    pub fn check_token(&self, input: &Value) -> Result<(), GuestRefusal> {
        self.grant(input).map(drop)
    }

    fn grant(&self, input: &Value) -> Result<Grant, GuestRefusal> {
        let token = input
            .get("query_params")
            .and_then(|q| q.get("token"))
            .and_then(Value::as_array)
            .and_then(|v| v.first())
            .and_then(Value::as_str)
            .ok_or(GuestRefusal::NoToken)?;
        lock(&self.live)
            .get(token)
            .cloned()
            .ok_or(GuestRefusal::UnknownToken)
    }

    /// The AuthResult for an AuthInput, or why the connection is refused.
    /// `engine_builtins` is what the live engine lists (every builtin not
    /// on the guest allowlist is forbidden, known or not).
    pub fn authenticate(
        &self,
        input: &Value,
        engine_builtins: &[String],
    ) -> Result<Value, GuestRefusal> {
        let grant = self.grant(input)?;
        let mut forbidden: Vec<String> = SANDBOX_CONTRACT
            .iter()
            .chain(INTERNAL_FUNCTIONS)
            .map(|s| s.to_string())
            .collect();
        forbidden.extend(policy::forbidden_builtins(
            engine_builtins.iter().map(String::as_str),
        ));
        Ok(json!({
            "allowed_functions": [],
            "forbidden_functions": forbidden,
            "allow_function_registration": true,
            "allowed_trigger_types": policy::GUEST_TRIGGER_TYPES,
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

    /// Counts one more registration of `function_id` by `lineage`'s guests,
    /// unless they hold `limit` already: those admitted lately, and those
    /// the engine still lists (`listed`); one a closed connection took with
    /// it no longer counts. Re-registering an id costs nothing.
    pub fn count_registration(
        &self,
        lineage: &Lineage,
        function_id: &str,
        listed: &std::collections::HashSet<String>,
        limit: usize,
    ) -> Result<(), GuestRefusal> {
        let mut registered = lock(&self.registered);
        let held = registered.entry(lineage.clone()).or_default();
        held.retain(|(id, at)| at.elapsed() < NOT_LISTED_YET || listed.contains(id));
        if held.iter().any(|(id, _)| id == function_id) {
            return Ok(());
        }
        if held.len() >= limit {
            return Err(GuestRefusal::Registrations(limit));
        }
        held.push((function_id.to_string(), std::time::Instant::now()));
        Ok(())
    }

    /// Who owns `ns` as far as this worker knows: the platform, a lineage
    /// (its runtime or its claim), a trusted caller's runtime, or nobody
    /// ([`NamespaceOwner::Free`]; the caller asks the bus whether another
    /// worker serves it).
    pub fn owner_of(&self, ns: &str) -> NamespaceOwner {
        if policy::is_reserved(ns) {
            return NamespaceOwner::Reserved;
        }
        if let Some(h) = lock(&self.held).get(ns) {
            return match &h.owner {
                Some(l) => NamespaceOwner::Lineage(l.clone()),
                None => NamespaceOwner::Trusted,
            };
        }
        match lock(&self.claims).get(ns) {
            Some(l) => NamespaceOwner::Lineage(l.clone()),
            None => NamespaceOwner::Free,
        }
    }

    /// The trigger-registration hook, given who owns the bound function's
    /// namespace and how many subscriptions the guest's lineage holds: a
    /// lifecycle subscription to one of the guest's own functions, scoped
    /// to its lineage (over anything the guest wrote there), within its
    /// bound. Anything else is refused.
    pub fn admit_trigger(
        &self,
        input: &Value,
        owner: &NamespaceOwner,
        subscriptions: impl Fn(&Lineage) -> usize,
        max_subscriptions: usize,
    ) -> Result<Value, GuestRefusal> {
        let guest = GuestTokens::guest_of(input.get("context"))?;
        let trigger_type = input
            .get("trigger_type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // A namespace runtime's guests act for its namespace.
        let owner = if in_own_namespace(input) {
            NamespaceOwner::Lineage(guest.lineage.clone())
        } else {
            owner.clone()
        };
        policy::decide_binding(&guest.lineage, trigger_type, &owner)
            .map_err(GuestRefusal::Binding)?;
        if subscriptions(&guest.lineage) >= max_subscriptions {
            return Err(GuestRefusal::Subscriptions(max_subscriptions));
        }
        let mut config = match input.get("config") {
            Some(Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        };
        config.insert(SCOPE_KEY.into(), guest.lineage.as_str().into());
        Ok(json!({ "config": config }))
    }

    /// The registration hook, given who owns the namespace (`owner_of`,
    /// refined by the bus): `{}` (keep everything) or a refusal. A free
    /// namespace becomes the guest lineage's claim, unless another lineage
    /// claimed it meanwhile.
    pub fn admit_registration(
        &self,
        input: &Value,
        owner: &NamespaceOwner,
    ) -> Result<Value, GuestRefusal> {
        let guest = GuestTokens::guest_of(input.get("context"))?;
        let ns = policy::namespace_of(hook_function_id(input));
        // A namespace runtime's guests may add ephemeral functions to it.
        if in_own_namespace(input) && !policy::is_reserved(ns) {
            return Ok(json!({}));
        }
        match policy::decide_registration(&guest.lineage, owner) {
            RegistrationVerdict::Allow => Ok(json!({})),
            RegistrationVerdict::Deny(whose) => Err(GuestRefusal::Taken(ns.to_string(), whose)),
            RegistrationVerdict::Claim => {
                if !lock(&self.live)
                    .values()
                    .any(|g| g.lineage == guest.lineage)
                {
                    return Err(GuestRefusal::UnknownToken);
                }
                let mut claims = lock(&self.claims);
                let held = lock(&self.held).contains_key(ns);
                match claims.get(ns) {
                    _ if held => Err(GuestRefusal::Taken(ns.to_string(), "a runtime")),
                    Some(l) if *l != guest.lineage => Err(GuestRefusal::Taken(
                        ns.to_string(),
                        "another tenant's guest code",
                    )),
                    _ => {
                        claims.insert(ns.to_string(), guest.lineage);
                        Ok(json!({}))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
