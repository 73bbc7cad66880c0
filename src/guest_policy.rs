//! What a guest may do: the one allowlist `docs/threat-model.md` writes out.
//!
//! Every guest request the worker is asked about (a call through the
//! middleware, a registration, a trigger binding, the engine builtins its
//! connection may reach) is first *classified* into what it touches, then
//! *decided* here by an exhaustive `match`. A class nobody thought of cannot
//! exist (the compiler wants every variant decided), and a target that fits
//! no allowed class is refused: there is no list of refusals to fall
//! through.
//!
//! Pure: the facts (who serves an id, who owns a namespace, what builtins the
//! engine has) are gathered by `guest_access` and `functions::guest_gate`.

use crate::function_ids as ids;
use crate::ids::OWN_NAMESPACE;
use crate::tenancy::Lineage;

/// Namespaces that belong to the platform: the engine, the daemon, this
/// worker and the configuration worker. No guest registers, binds or calls
/// anything in them except what [`decide_call`] serves.
pub const RESERVED_NAMESPACES: &[&str] = &["engine", "sandbox", OWN_NAMESPACE, "configuration"];

/// The engine builtins a guest connection may call: logging and context
/// propagation (`log::*`, `baggage::*`), and the two introspection calls
/// seed 000 gives guest code (`functions::list`, `functions::info`), which
/// the engine answers through the caller's own RBAC session: they show only
/// what the guest may call. None of them names, changes, holds or waits on
/// anything of another connection, and none leaves anything behind
/// (the engine's log store is a ring of `logs_max_count`).
///
/// Two of the engine's own infrastructure carve-out stay out, read in
/// iii-hq/iii 0.23.0-rc.4 (`docs/engine.md`, "What a guest cannot name or
/// hold"):
/// - `engine::workers::register` claims a worker name, one live connection
///   per `(namespace, name)` engine-wide, and declares the connection's
///   namespace; the name cannot be pinned by the auth result and builtins
///   skip the middleware, so a guest could take the name of any worker that
///   is down for a moment and lock it out for good. Without it a guest's
///   SDK connects unnamed, in `default`; its registrations wait for the
///   engine's `registration_namespace_grace_ms`, which the printed
///   listener config sets low.
/// - `engine::channels::create` makes a channel with no owner, which the
///   engine keeps up to five minutes whatever becomes of the connection:
///   nothing could count or release a lineage's channels. The SDKs call it
///   only for their explicit channel helpers.
pub const GUEST_BUILTINS: &[&str] = &[
    "engine::functions::list",
    "engine::functions::info",
    "engine::log::info",
    "engine::log::warn",
    "engine::log::error",
    "engine::log::debug",
    "engine::log::trace",
    "engine::baggage::get",
    "engine::baggage::set",
    "engine::baggage::get_all",
];

/// The engine builtins of 0.23.0-rc.4 (read from its `#[function(id = …)]`
/// attributes), plus the queue's enqueue provider. The auth function forbids
/// every one of these and every `engine::` id the live engine lists, except
/// [`GUEST_BUILTINS`]: builtins skip the middleware, so the engine's RBAC is
/// the only gate they pass.
pub const KNOWN_ENGINE_BUILTINS: &[&str] = &[
    "engine::alerts::evaluate",
    "engine::alerts::list",
    "engine::baggage::get",
    "engine::baggage::get_all",
    "engine::baggage::set",
    "engine::channels::create",
    "engine::functions::info",
    "engine::functions::list",
    "engine::health::check",
    "engine::log::debug",
    "engine::log::error",
    "engine::log::info",
    "engine::log::trace",
    "engine::log::warn",
    "engine::logs::clear",
    "engine::logs::list",
    "engine::metrics::list",
    "engine::queue::dlq_messages",
    "engine::queue::dlq_topics",
    "engine::queue::enqueue",
    "engine::queue::list_topics",
    "engine::queue::topic_stats",
    "engine::register_trigger",
    "engine::registered-triggers::info",
    "engine::registered-triggers::list",
    "engine::rollups::list",
    "engine::sampling::rules",
    "engine::shutdown",
    "engine::traces::clear",
    "engine::traces::group_by",
    "engine::traces::list",
    "engine::traces::tree",
    "engine::triggers::info",
    "engine::triggers::list",
    "engine::unregister_trigger",
    "engine::workers::info",
    "engine::workers::list",
    "engine::workers::register",
];

/// The trigger types a guest may bind: the worker's lifecycle events, which
/// the trigger hook scopes to the guest's own lineage. An HTTP route, a cron
/// or a queue binding would publish or schedule guest code for callers the
/// guest does not know, outside its lineage's budget.
pub const GUEST_TRIGGER_TYPES: &[&str] = &[ids::EVENT_TRIGGER_TYPE];

/// The namespace of a function id (`a::b::c` → `a`; an id without `::` is
/// its own namespace).
pub fn namespace_of(function_id: &str) -> &str {
    function_id
        .split_once("::")
        .map_or(function_id, |(ns, _)| ns)
}

/// Whether `ns` is one of [`RESERVED_NAMESPACES`].
pub fn is_reserved(ns: &str) -> bool {
    RESERVED_NAMESPACES.contains(&ns)
}

/// The engine builtins a guest connection is forbidden: every builtin known
/// or listed by the live engine, less [`GUEST_BUILTINS`]. Sorted, no
/// duplicates.
pub fn forbidden_builtins<'a>(live: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = KNOWN_ENGINE_BUILTINS
        .iter()
        .copied()
        .chain(live.into_iter().filter(|id| id.starts_with("engine::")))
        .filter(|id| !GUEST_BUILTINS.contains(id))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Who owns a namespace, as far as guests are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceOwner {
    /// The platform's ([`RESERVED_NAMESPACES`]).
    Reserved,
    /// A guest lineage: it created a runtime there through the worker, or
    /// registered there first on its own connection.
    Lineage(Lineage),
    /// A runtime a trusted caller created through this worker.
    Trusted,
    /// Functions on the bus that no runtime of this worker serves: another
    /// worker's.
    OtherWorker,
    /// Nothing lives there.
    Free,
}

/// What a guest call aims at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallTarget {
    /// `run`, `register_function`, `teardown`: served as the guest's tenant.
    WorkerOperation,
    /// Anything else of this worker, the daemon's `sandbox::*`, the
    /// configuration worker, or an `engine::` id some worker registered.
    Reserved,
    /// A handler this worker publishes, in a namespace owned as given.
    Handler(NamespaceOwner),
    /// A function in a namespace a guest lineage registered directly.
    LineageFunction(Lineage),
    /// Anything else: another worker's function, or nothing at all (the
    /// engine then answers `function_not_found`). The operator's
    /// `expose_functions` already admitted it.
    Elsewhere,
}

/// How the middleware handles a guest call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallVerdict {
    /// Served in-process as the guest's tenant.
    ServeAsTenant,
    /// Forwarded to its target; `counted` holds one of the lineage's call
    /// slots for as long as the target works on it (whatever the routing).
    Forward { counted: bool },
    /// Refused with `FORBIDDEN`, for the reason given.
    Deny(&'static str),
}

/// The decision for a guest of `lineage` calling `target`.
pub fn decide_call(lineage: &Lineage, target: &CallTarget) -> CallVerdict {
    match target {
        CallTarget::WorkerOperation => CallVerdict::ServeAsTenant,
        CallTarget::Reserved => CallVerdict::Deny("it belongs to the platform, not to tenants"),
        CallTarget::Handler(NamespaceOwner::Lineage(owner)) if owner != lineage => {
            CallVerdict::Deny("it is another tenant's")
        }
        CallTarget::Handler(_) => CallVerdict::Forward { counted: true },
        CallTarget::LineageFunction(owner) if owner != lineage => {
            CallVerdict::Deny("it is another tenant's")
        }
        CallTarget::LineageFunction(_) => CallVerdict::Forward { counted: false },
        CallTarget::Elsewhere => CallVerdict::Forward { counted: false },
    }
}

/// What a guest registration into a namespace with `owner` gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationVerdict {
    /// Its lineage owns the namespace already.
    Allow,
    /// The namespace is free: its lineage claims it (until the lineage ends).
    Claim,
    /// Refused; the owner kind says by whom it is held.
    Deny(&'static str),
}

/// The decision for a guest of `lineage` registering into a namespace held
/// by `owner`.
pub fn decide_registration(lineage: &Lineage, owner: &NamespaceOwner) -> RegistrationVerdict {
    match owner {
        NamespaceOwner::Lineage(l) if l == lineage => RegistrationVerdict::Allow,
        NamespaceOwner::Lineage(_) => RegistrationVerdict::Deny("another tenant's guest code"),
        NamespaceOwner::Reserved => RegistrationVerdict::Deny("the platform"),
        NamespaceOwner::Trusted => RegistrationVerdict::Deny("a trusted caller's runtime"),
        NamespaceOwner::OtherWorker => RegistrationVerdict::Deny("another worker"),
        NamespaceOwner::Free => RegistrationVerdict::Claim,
    }
}

/// Whether a guest of `lineage` may bind `trigger_type` to a function in a
/// namespace owned by `owner`: only allowed types, only to its own
/// functions.
pub fn decide_binding(
    lineage: &Lineage,
    trigger_type: &str,
    owner: &NamespaceOwner,
) -> Result<(), &'static str> {
    if !GUEST_TRIGGER_TYPES.contains(&trigger_type) {
        return Err("guests may bind only sandbox-code-runner's lifecycle events");
    }
    match owner {
        NamespaceOwner::Lineage(l) if l == lineage => Ok(()),
        _ => Err("guests may bind triggers only to functions of their own namespaces"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("engine::functions::info", "engine")]
    #[case("a::b::c", "a")]
    #[case("bare", "bare")]
    fn a_namespace_is_what_precedes_the_first_separator(#[case] id: &str, #[case] ns: &str) {
        assert_eq!(namespace_of(id), ns);
    }

    #[test]
    fn every_builtin_but_the_carve_out_is_forbidden_including_unknown_ones() {
        // The carve-out as docs/threat-model.md writes it, not the constant:
        // widening GUEST_BUILTINS (say, to engine::shutdown) fails here.
        let allowed = [
            "engine::functions::list",
            "engine::functions::info",
            "engine::log::info",
            "engine::log::warn",
            "engine::log::error",
            "engine::log::debug",
            "engine::log::trace",
            "engine::baggage::get",
            "engine::baggage::set",
            "engine::baggage::get_all",
        ];
        let got = forbidden_builtins(["engine::brand_new", "app::f", "engine::log::info"]);
        for id in KNOWN_ENGINE_BUILTINS {
            assert_eq!(got.contains(&id.to_string()), !allowed.contains(id), "{id}");
        }
        for id in [
            "engine::workers::register",
            "engine::channels::create",
            "engine::shutdown",
            "engine::workers::list",
        ] {
            assert!(got.contains(&id.to_string()), "{id} is forbidden");
        }
        assert!(got.contains(&"engine::brand_new".to_string()));
        assert!(!got.iter().any(|id| id == "app::f"));
        assert!(got.windows(2).all(|w| w[0] < w[1]), "sorted, unique");
    }

    #[rstest]
    #[case::own_op(CallTarget::WorkerOperation, CallVerdict::ServeAsTenant)]
    #[case::platform(CallTarget::Reserved, CallVerdict::Deny(""))]
    #[case::trusted_handler(CallTarget::Handler(NamespaceOwner::Trusted), CallVerdict::Forward { counted: true })]
    #[case::elsewhere(CallTarget::Elsewhere, CallVerdict::Forward { counted: false })]
    fn calls_are_decided_by_what_they_touch(#[case] target: CallTarget, #[case] want: CallVerdict) {
        let got = decide_call(&Lineage::fresh(), &target);
        match (got, want) {
            (CallVerdict::Deny(_), CallVerdict::Deny(_)) => {}
            (got, want) => assert_eq!(got, want),
        }
    }

    #[test]
    fn a_lineage_reaches_its_own_functions_and_no_other_tenants() {
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        let own = CallTarget::Handler(NamespaceOwner::Lineage(a.clone()));
        assert_eq!(
            decide_call(&a, &own),
            CallVerdict::Forward { counted: true }
        );
        assert!(matches!(decide_call(&b, &own), CallVerdict::Deny(_)));
        let direct = CallTarget::LineageFunction(a.clone());
        assert_eq!(
            decide_call(&a, &direct),
            CallVerdict::Forward { counted: false }
        );
        assert!(matches!(decide_call(&b, &direct), CallVerdict::Deny(_)));
    }

    #[test]
    fn registrations_go_only_into_owned_or_free_namespaces() {
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        let mine = NamespaceOwner::Lineage(a.clone());
        assert_eq!(decide_registration(&a, &mine), RegistrationVerdict::Allow);
        assert_eq!(
            decide_registration(&a, &NamespaceOwner::Free),
            RegistrationVerdict::Claim
        );
        for owner in [
            NamespaceOwner::Lineage(b),
            NamespaceOwner::Reserved,
            NamespaceOwner::Trusted,
            NamespaceOwner::OtherWorker,
        ] {
            assert!(
                matches!(
                    decide_registration(&a, &owner),
                    RegistrationVerdict::Deny(_)
                ),
                "{owner:?}"
            );
        }
    }

    #[test]
    fn bindings_need_an_allowed_type_and_an_own_target() {
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        let mine = NamespaceOwner::Lineage(a.clone());
        assert!(decide_binding(&a, ids::EVENT_TRIGGER_TYPE, &mine).is_ok());
        assert!(decide_binding(&a, "http", &mine).is_err());
        assert!(decide_binding(&a, "cron", &mine).is_err());
        assert!(decide_binding(&b, ids::EVENT_TRIGGER_TYPE, &mine).is_err());
        assert!(decide_binding(&a, ids::EVENT_TRIGGER_TYPE, &NamespaceOwner::Trusted).is_err());
        assert!(decide_binding(&a, ids::EVENT_TRIGGER_TYPE, &NamespaceOwner::Free).is_err());
    }

    #[test]
    fn the_platform_namespaces_are_reserved() {
        for ns in ["engine", "sandbox", "sandbox-code-runner", "configuration"] {
            assert!(is_reserved(ns), "{ns}");
        }
        assert!(!is_reserved("app"));
    }
}
