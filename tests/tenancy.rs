//! Guest tenancy over the in-memory fakes: a guest (a lineage, at a depth)
//! registers only into fresh or owned namespaces, tears down only its own,
//! holds at most its budget of VMs, nests only so deep; the guest
//! listener's middleware serves the worker's functions as that tenant and
//! forwards the rest with their answers unchanged. The same outcomes end to
//! end, on the stand-in and a real engine, are the `guest.tenancy.*`
//! conformance cases.

mod fakes;

use std::sync::Arc;

use fakes::{FakeBus, FakeSandbox};
use sandbox_code_runner::bus::Routing;
use sandbox_code_runner::config::Config;
use sandbox_code_runner::error::{ErrorCode, WorkerError};
use sandbox_code_runner::functions;
use sandbox_code_runner::guest_access::GUEST_MIDDLEWARE;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::tenancy::{Admission, Caller, Guest, Lineage};
use serde_json::{json, Value};

struct World {
    sandbox: Arc<FakeSandbox>,
    bus: Arc<FakeBus>,
    manager: Arc<Manager>,
}

fn world(runs: usize, depth: u32) -> World {
    let sandbox = FakeSandbox::new();
    let bus = Arc::new(FakeBus::default());
    let manager = Manager::new(
        sandbox.clone(),
        bus.clone(),
        Config {
            warm_pool: 0,
            // The in-memory daemon answers wrapper execs, not relays.
            prestart: false,
            guest_url: Some("ws://127.0.0.1:49135".into()),
            guest_max_concurrent_runs: runs,
            guest_max_run_depth: depth,
            ..Config::default()
        },
        VmNaming::new("test-owner"),
        "ws://127.0.0.2:49134".into(),
    );
    functions::publish_all(bus.as_ref(), &manager);
    World {
        sandbox,
        bus,
        manager,
    }
}

/// A lineage as the worker roots one: a trusted admission, kept alive (a
/// lineage's runtimes end with its root).
fn rooted(w: &World) -> (Lineage, Admission) {
    let root = w.manager.tenants().admit(&Caller::Trusted).unwrap();
    (root.lineage.clone(), root)
}

fn guest(l: &Lineage, depth: u32) -> Caller {
    Caller::Guest(Guest {
        lineage: l.clone(),
        depth,
    })
}

async fn run(w: &World, caller: &Caller, payload: Value) -> Result<Value, WorkerError> {
    functions::run::handle(&w.manager, caller, payload)
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

async fn register(w: &World, caller: &Caller, id: &str) -> Result<Value, WorkerError> {
    functions::register::handle(
        &w.manager,
        caller,
        json!({"function_id": id, "lang": "python", "source": "def handler(p):\n    return 1"}),
    )
    .await
    .map(|r| serde_json::to_value(r).unwrap())
}

async fn teardown_ns(w: &World, caller: &Caller, ns: &str) -> Result<Value, WorkerError> {
    functions::teardown::handle(&w.manager, caller, json!({"namespace": ns}))
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

fn refused_naming(r: &Result<Value, WorkerError>, code: ErrorCode, needle: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.code(), code, "{e}");
            assert!(e.to_string().contains(needle), "{e} names {needle}");
        }
        Ok(v) => panic!("expected {code}, got {v}"),
    }
}

#[tokio::test]
async fn a_guest_registers_only_into_fresh_or_owned_namespaces() {
    let w = world(8, 4);
    let ((a, _ra), (b, _rb)) = (rooted(&w), rooted(&w));
    register(&w, &Caller::Trusted, "ops::f").await.unwrap();

    let into_trusted = register(&w, &guest(&a, 0), "ops::g").await;
    refused_naming(&into_trusted, ErrorCode::InvalidRequest, "`ops`");
    assert!(!w.bus.ids().contains(&"ops::g".to_string()));

    register(&w, &guest(&a, 0), "mine::f").await.unwrap();
    register(&w, &guest(&a, 1), "mine::g").await.unwrap();
    let into_foreign = register(&w, &guest(&b, 0), "mine::h").await;
    refused_naming(&into_foreign, ErrorCode::InvalidRequest, "`mine`");
    // A trusted caller never lands in a guest's namespace (its handler would
    // run in the guest's VM); it takes the namespace back by teardown.
    let into_guests = register(&w, &Caller::Trusted, "mine::t").await;
    refused_naming(&into_guests, ErrorCode::InvalidRequest, "guest code");
    assert_eq!(w.manager.tenants().held(&a), 1, "one namespace runtime");
    teardown_ns(&w, &Caller::Trusted, "mine").await.unwrap();
    register(&w, &Caller::Trusted, "mine::t").await.unwrap();
}

#[tokio::test]
async fn a_guest_tears_down_only_its_own_namespaces_and_cannot_probe() {
    let w = world(8, 4);
    let (a, _ra) = rooted(&w);
    register(&w, &Caller::Trusted, "ops::f").await.unwrap();
    register(&w, &guest(&a, 0), "mine::f").await.unwrap();

    let foreign = teardown_ns(&w, &guest(&a, 0), "ops").await;
    let absent = teardown_ns(&w, &guest(&a, 0), "nobody").await;
    refused_naming(&foreign, ErrorCode::InvalidRequest, "`ops`");
    refused_naming(&absent, ErrorCode::InvalidRequest, "`nobody`");
    assert_eq!(
        foreign.unwrap_err().to_string().replace("ops", "X"),
        absent.unwrap_err().to_string().replace("nobody", "X"),
        "another tenant's namespace and no namespace answer alike"
    );
    assert!(w.bus.ids().contains(&"ops::f".to_string()), "untouched");

    let own = teardown_ns(&w, &guest(&a, 0), "mine").await.unwrap();
    assert_eq!(own["unregistered"], json!(["mine::f"]));
    assert_eq!(w.manager.tenants().held(&a), 0, "the budget got it back");
    // Trusted callers may tear down anything, a guest's namespace included.
    register(&w, &guest(&a, 0), "mine::g").await.unwrap();
    teardown_ns(&w, &Caller::Trusted, "mine").await.unwrap();
    teardown_ns(&w, &Caller::Trusted, "ops").await.unwrap();
    assert_eq!(w.manager.tenants().active(), 0);
    assert!(w.sandbox.live.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_guests_budget_bounds_its_vms_and_nobody_elses() {
    let w = world(2, 4);
    let ((a, _ra), (b, _rb)) = (rooted(&w), rooted(&w));
    let keep = json!({"lang": "python", "code": "print(1)", "keep": true});
    let first = run(&w, &guest(&a, 0), keep.clone()).await.unwrap();
    register(&w, &guest(&a, 0), "mine::f").await.unwrap();
    // Two VMs held: a third, of any kind, is refused naming the setting.
    let over = run(
        &w,
        &guest(&a, 0),
        json!({"lang": "python", "code": "print(1)"}),
    )
    .await;
    refused_naming(&over, ErrorCode::Capacity, "guest_max_concurrent_runs");
    refused_naming(
        &register(&w, &guest(&a, 0), "more::f").await,
        ErrorCode::Capacity,
        "guest_max_concurrent_runs",
    );
    // Another tenant and the main listener are not starved.
    run(&w, &guest(&b, 0), keep).await.unwrap();
    for _ in 0..3 {
        run(
            &w,
            &Caller::Trusted,
            json!({"lang": "python", "code": "print(1)"}),
        )
        .await
        .unwrap();
    }
    // A run in a runtime it holds needs no new VM.
    let rt = first["runtime_id"].as_str().unwrap();
    run(
        &w,
        &guest(&a, 0),
        json!({"runtime_id": rt, "code": "print(2)"}),
    )
    .await
    .unwrap();
    // Tearing one down gives the slot back.
    functions::teardown::handle(&w.manager, &guest(&a, 0), json!({"runtime_id": rt}))
        .await
        .unwrap();
    run(
        &w,
        &guest(&a, 0),
        json!({"lang": "python", "code": "print(1)"}),
    )
    .await
    .unwrap();
    assert_eq!(w.manager.tenants().held(&a), 1, "the namespace runtime");
}

#[tokio::test]
async fn guest_runs_nest_only_as_deep_as_the_setting() {
    let w = world(8, 3);
    let (l, _rl) = rooted(&w);
    let code = json!({"lang": "python", "code": "print(1)"});
    run(&w, &guest(&l, 2), code.clone()).await.unwrap();
    let deep = run(&w, &guest(&l, 3), code.clone()).await;
    refused_naming(&deep, ErrorCode::Capacity, "guest_max_run_depth");
    refused_naming(
        &register(&w, &guest(&l, 3), "deep::f").await,
        ErrorCode::Capacity,
        "guest_max_run_depth",
    );
    assert_eq!(w.manager.tenants().active(), 0, "a refusal holds nothing");
}

fn middleware_input(function_id: &str, payload: Value, context: Value) -> Value {
    json!({"function_id": function_id, "payload": payload, "action": null,
           "context": context, "namespace": "default"})
}

#[tokio::test]
async fn the_middleware_serves_the_worker_as_the_guests_tenant() {
    let w = world(1, 4);
    let (lineage, _root) = rooted(&w);
    let ctx = json!({"lineage": lineage.as_str(), "depth": 0, "namespace": null});
    register(&w, &Caller::Trusted, "ops::f").await.unwrap();
    let via = |f: &str, p: Value, c: Value| {
        w.bus
            .call_published(GUEST_MIDDLEWARE, middleware_input(f, p, c))
    };

    let refused = via(
        "sandbox-code-runner::register_function",
        json!({"function_id": "ops::g", "lang": "python", "source": "def handler(p):\n    return 1"}),
        ctx.clone(),
    )
    .await;
    refused_naming(&refused, ErrorCode::InvalidRequest, "`ops`");
    let kept = via(
        "sandbox-code-runner::run",
        json!({"lang": "python", "code": "print(1)", "keep": true}),
        ctx.clone(),
    )
    .await
    .unwrap();
    assert!(kept["runtime_id"].is_string(), "{kept}");
    assert_eq!(
        w.manager.tenants().held(&lineage),
        1,
        "charged to the guest"
    );
    refused_naming(
        &via(
            "sandbox-code-runner::run",
            json!({"lang": "python", "code": "print(1)"}),
            ctx.clone(),
        )
        .await,
        ErrorCode::Capacity,
        "guest_max_concurrent_runs",
    );
    // Without the worker's own auth context, nothing is served.
    refused_naming(
        &via(
            "sandbox-code-runner::run",
            json!({"lang": "python", "code": "1"}),
            json!({}),
        )
        .await,
        ErrorCode::InvalidRequest,
        "context.lineage",
    );
    // A queue's consumer would run it as a trusted caller.
    let enqueue = w
        .bus
        .call_published(
            GUEST_MIDDLEWARE,
            json!({"function_id": "sandbox-code-runner::run", "payload": {},
                   "action": {"type": "enqueue", "queue": "q"}, "context": ctx}),
        )
        .await;
    refused_naming(&enqueue, ErrorCode::InvalidRequest, "enqueue");
}

#[tokio::test]
async fn the_middleware_serves_its_handlers_and_forwards_other_calls_unchanged() {
    let w = world(4, 4);
    let (l, _root) = rooted(&w);
    let ctx = json!({"lineage": l.as_str(), "depth": 1});
    register(&w, &Caller::Trusted, "ops::f").await.unwrap();
    let handler_answer = w
        .bus
        .call_published(
            GUEST_MIDDLEWARE,
            middleware_input("ops::f", json!({}), ctx.clone()),
        )
        .await
        .unwrap();
    assert_eq!(handler_answer, json!({"doubled": 42}));

    let missing = w
        .bus
        .call_published(
            GUEST_MIDDLEWARE,
            middleware_input("nope::x", json!({}), ctx.clone()),
        )
        .await
        .unwrap_err();
    let (code, message) = missing.to_wire();
    assert_eq!(code, "function_not_found", "the engine's code, unwrapped");
    assert_eq!(message, "Function nope::x not found in namespace default.");

    // The worker's own error codes pass through as they were.
    let bad = w
        .bus
        .call_published(
            GUEST_MIDDLEWARE,
            middleware_input("sandbox-code-runner::teardown", json!({}), ctx.clone()),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.to_wire().0, "sandbox-code-runner::invalid_request");

    let handler_execs = || {
        w.sandbox
            .ops()
            .iter()
            .filter(|o| o.as_str() == "exec")
            .count()
    };
    let before_void = handler_execs();
    let void = w
        .bus
        .call_published(
            GUEST_MIDDLEWARE,
            json!({"function_id": "ops::f", "payload": {}, "action": {"type": "void"},
                   "context": ctx, "namespace": "default"}),
        )
        .await;
    assert_eq!(void.unwrap(), Value::Null, "a void call answers at once");
    // A void call to a handler is served in the background, so it holds its
    // tenant's slot while the handler runs.
    let served = code_runner_conformance::standin::wait::until(
        std::time::Duration::from_secs(5),
        || async { handler_execs() > before_void },
    )
    .await;
    assert!(served, "the void call reached its handler");
    let forwarded = w.bus.forwarded.lock().unwrap().clone();
    assert_eq!(
        forwarded,
        vec![("nope::x".to_string(), Routing::Wait)],
        "the worker's own functions and handlers are served in-process, never forwarded"
    );
}

/// A tenant's calls waiting on this worker's handlers are bounded: each
/// runtime serves `handler_concurrency` calls at once, so a flood would
/// stall the owner's own calls behind it.
#[tokio::test]
async fn a_guests_calls_waiting_on_handlers_are_bounded_per_tenant() {
    let w = world(1, 4);
    register(&w, &Caller::Trusted, "ops::f").await.unwrap();
    let ((a, _ra), (b, _rb)) = (rooted(&w), rooted(&w));
    let call = |l: &Lineage| {
        let ctx = json!({"lineage": l.as_str(), "depth": 0});
        w.bus
            .call_published(GUEST_MIDDLEWARE, middleware_input("ops::f", json!({}), ctx))
    };
    // Polled in order: the first holds its slot when the second asks.
    let (first, second, other) = futures_util::join!(call(&a), call(&a), call(&b));
    assert_eq!(first.unwrap(), json!({"doubled": 42}));
    refused_naming(&second, ErrorCode::Capacity, "guest_max_concurrent_runs");
    assert_eq!(
        other.unwrap(),
        json!({"doubled": 42}),
        "another tenant is not refused"
    );
    // Done, the slot is back.
    assert!(call(&a).await.is_ok());
}
