//! What the guest listener answers: tokens, owners, hooks.
use super::*;
use rstest::rstest;

fn input(token: &str) -> Value {
    json!({"headers": {}, "ip_address": "127.0.0.1", "query_params": {"token": [token]}})
}

fn ctx(l: &Lineage, namespace: Option<&str>) -> Value {
    json!({"lineage": l.as_str(), "depth": 0, "namespace": namespace})
}

#[test]
fn a_minted_token_authenticates_until_its_lease_drops() {
    let tokens = GuestTokens::new();
    let lease = tokens.mint(None, &Lineage::fresh(), 0);
    let live = vec!["engine::brand_new".to_string()];
    let policy = tokens.authenticate(&input(lease.expose()), &live).unwrap();
    let forbidden = policy["forbidden_functions"].as_array().unwrap();
    for f in SANDBOX_CONTRACT.iter().chain(INTERNAL_FUNCTIONS).chain(&[
        "engine::registered-triggers::list",
        "engine::workers::list",
        "engine::queue::enqueue",
        "engine::brand_new",
    ]) {
        assert!(forbidden.contains(&json!(f)), "{f} not forbidden");
    }
    for allowed in policy::GUEST_BUILTINS.iter().chain(&[
        "sandbox-code-runner::run",
        "sandbox-code-runner::register_function",
        "sandbox-code-runner::teardown",
    ]) {
        assert!(!forbidden.contains(&json!(allowed)), "{allowed} forbidden");
    }
    assert_eq!(
        policy["allowed_trigger_types"],
        json!(policy::GUEST_TRIGGER_TYPES)
    );
    let secret = lease.expose().to_string();
    drop(lease);
    assert!(matches!(
        tokens.authenticate(&input(&secret), &[]),
        Err(GuestRefusal::UnknownToken)
    ));
    assert_eq!(tokens.live(), 0);
}

/// Guest code calls neither the operator's inventory nor `watch`: the
/// engine refuses both before the worker sees the call (a stream's text
/// goes only to the holder of its writer ref, and a guest holds none).
#[rstest]
#[case::inventory("sandbox-code-runner::list_runtimes")]
#[case::watch("sandbox-code-runner::watch")]
fn the_inventory_and_watch_are_forbidden_to_guests(#[case] function_id: &str) {
    let tokens = GuestTokens::new();
    for namespace in [None, Some("mine")] {
        let lease = tokens.mint(namespace, &Lineage::fresh(), 0);
        let policy = tokens.authenticate(&input(lease.expose()), &[]).unwrap();
        let forbidden = policy["forbidden_functions"].as_array().unwrap();
        assert!(
            forbidden.contains(&json!(function_id)),
            "{function_id} is callable by a guest ({namespace:?}): {forbidden:?}"
        );
    }
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
    assert!(GuestTokens::new().authenticate(&i, &[]).is_err());
}

#[test]
fn namespaces_have_one_owner_each() {
    let tokens = GuestTokens::new();
    let a = Lineage::fresh();
    tokens.hold("billing", None);
    tokens.hold("mine", Some(&a));
    assert_eq!(tokens.owner_of("billing"), NamespaceOwner::Trusted);
    assert_eq!(tokens.owner_of("mine"), NamespaceOwner::Lineage(a));
    assert_eq!(tokens.owner_of("engine"), NamespaceOwner::Reserved);
    assert_eq!(tokens.owner_of("configuration"), NamespaceOwner::Reserved);
    assert_eq!(tokens.owner_of("fresh"), NamespaceOwner::Free);
    tokens.release("billing");
    assert_eq!(tokens.owner_of("billing"), NamespaceOwner::Free);
}

#[rstest]
#[case::reserved_engine("engine::functions::info", None, false)]
#[case::reserved_daemon("sandbox::anything", None, false)]
#[case::reserved_worker("sandbox-code-runner::run", None, false)]
#[case::reserved_config("configuration::set", None, false)]
#[case::trusted_runtime("billing::charge", None, false)]
#[case::own_runtime_namespace("billing::tmp", Some("billing"), true)]
#[case::fresh("mine::f", None, true)]
fn registrations_go_only_where_the_lineage_may(
    #[case] id: &str,
    #[case] own: Option<&str>,
    #[case] ok: bool,
) {
    let tokens = GuestTokens::new();
    let l = Lineage::fresh();
    let _lease = tokens.mint(own, &l, 0);
    tokens.hold("billing", None);
    let owner = tokens.owner_of(policy::namespace_of(id));
    let got =
        tokens.admit_registration(&json!({"function_id": id, "context": ctx(&l, own)}), &owner);
    assert_eq!(got.is_ok(), ok, "{id}: {got:?}");
}

#[test]
fn a_free_namespace_becomes_the_first_lineages_until_its_tokens_are_gone() {
    let tokens = GuestTokens::new();
    let (a, b) = (Lineage::fresh(), Lineage::fresh());
    let lease_a = tokens.mint(None, &a, 0);
    let _lease_b = tokens.mint(None, &b, 0);
    let reg = |id: &str, l: &Lineage| {
        let owner = tokens.owner_of(policy::namespace_of(id));
        tokens.admit_registration(&json!({"function_id": id, "context": ctx(l, None)}), &owner)
    };
    assert!(reg("shared-x::f", &a).is_ok());
    assert_eq!(
        tokens.owner_of("shared-x"),
        NamespaceOwner::Lineage(a.clone())
    );
    assert!(reg("shared-x::g", &a).is_ok(), "its own claim");
    assert!(matches!(
        reg("shared-x::h", &b),
        Err(GuestRefusal::Taken(..))
    ));
    drop(lease_a);
    assert_eq!(tokens.owner_of("shared-x"), NamespaceOwner::Free);
    assert!(reg("shared-x::h", &b).is_ok());
}

#[test]
fn registrations_are_bounded_while_they_exist() {
    let tokens = GuestTokens::new();
    let l = Lineage::fresh();
    let lease = tokens.mint(None, &l, 0);
    let none = std::collections::HashSet::new();
    for id in ["m::a", "m::b"] {
        tokens.count_registration(&l, id, &none, 2).unwrap();
    }
    assert!(
        tokens.count_registration(&l, "m::a", &none, 2).is_ok(),
        "again"
    );
    assert!(matches!(
        tokens.count_registration(&l, "m::c", &none, 2),
        Err(GuestRefusal::Registrations(2))
    ));
    assert!(
        tokens
            .count_registration(&Lineage::fresh(), "n::a", &none, 2)
            .is_ok(),
        "another tenant has its own bound"
    );
    drop(lease);
    assert!(
        tokens.count_registration(&l, "m::c", &none, 2).is_ok(),
        "a new life"
    );
}

#[test]
fn a_namespace_another_worker_serves_is_refused() {
    let tokens = GuestTokens::new();
    let l = Lineage::fresh();
    let _lease = tokens.mint(None, &l, 0);
    let got = tokens.admit_registration(
        &json!({"function_id": "billing::charge", "context": ctx(&l, None)}),
        &NamespaceOwner::OtherWorker,
    );
    assert!(matches!(got, Err(GuestRefusal::Taken(_, "another worker"))));
    assert_eq!(
        tokens.owner_of("billing"),
        NamespaceOwner::Free,
        "nothing claimed"
    );
}

#[test]
fn the_auth_context_carries_the_lineage_and_depth_and_reads_back() {
    let tokens = GuestTokens::new();
    let l = Lineage::fresh();
    let lease = tokens.mint(Some("app"), &l, 2);
    let policy = tokens.authenticate(&input(lease.expose()), &[]).unwrap();
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
fn lifecycle_subscriptions_are_scoped_bounded_and_aimed_at_own_functions() {
    let tokens = GuestTokens::new();
    let l = Lineage::fresh();
    let mine = NamespaceOwner::Lineage(l.clone());
    let hook = |trigger_type: &str, config: Value, owner: &NamespaceOwner, held: usize| {
        tokens.admit_trigger(
            &json!({
                "trigger_id": "t", "trigger_type": trigger_type, "function_id": "g::sink",
                "config": config, "metadata": null, "namespace": "default",
                "context": ctx(&l, None)
            }),
            owner,
            |_| held,
            8,
        )
    };
    let forged = hook(
        ids::EVENT_TRIGGER_TYPE,
        json!({"events": ["runtime.created"], SCOPE_KEY: "ln-someone-else"}),
        &mine,
        0,
    )
    .unwrap();
    assert_eq!(forged["config"][SCOPE_KEY], l.as_str());
    assert_eq!(forged["config"]["events"], json!(["runtime.created"]));
    assert_eq!(
        hook(ids::EVENT_TRIGGER_TYPE, Value::Null, &mine, 0).unwrap()["config"][SCOPE_KEY],
        l.as_str()
    );
    assert!(matches!(
        hook("cron", json!({"expression": "* * * * *"}), &mine, 0),
        Err(GuestRefusal::Binding(_))
    ));
    assert!(matches!(
        hook(
            ids::EVENT_TRIGGER_TYPE,
            json!({}),
            &NamespaceOwner::Trusted,
            0
        ),
        Err(GuestRefusal::Binding(_))
    ));
    assert!(matches!(
        hook(ids::EVENT_TRIGGER_TYPE, json!({}), &mine, 8),
        Err(GuestRefusal::Subscriptions(8))
    ));
    assert!(tokens
        .admit_trigger(
            &json!({"trigger_type": ids::EVENT_TRIGGER_TYPE, "context": {}}),
            &mine,
            |_| 0,
            8
        )
        .is_err());
}
