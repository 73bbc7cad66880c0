//! The runtime manager over in-memory fakes of the sandbox client and the
//! bus: every branch of the error mapping, keep/reuse/one-shot, expiry,
//! serialization, registration and teardown.

mod fakes;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fakes::{daemon, frame_for, ok_out, FakeBus, FakeSandbox};
use rstest::rstest;
use sandbox_code_runner::bus::BusError;
use sandbox_code_runner::config::Config;
use sandbox_code_runner::error::{ErrorCode, WorkerError};
use sandbox_code_runner::functions;
use sandbox_code_runner::ids::Lang;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::sandbox::{ExecOutput, SandboxError};
use sandbox_code_runner::tenancy::Caller;
use serde_json::{json, Value};

struct World {
    sandbox: Arc<FakeSandbox>,
    bus: Arc<FakeBus>,
    manager: Arc<Manager>,
}

/// No pool, and every call on the cold path (`tests/prestart.rs` covers
/// the pre-started one).
fn world() -> World {
    world_with(Config {
        warm_pool: 0,
        prestart: false,
        ..Config::default()
    })
}

fn world_with(config: Config) -> World {
    let sandbox = FakeSandbox::new();
    let bus = Arc::new(FakeBus::default());
    let manager = Manager::new(
        sandbox.clone(),
        bus.clone(),
        config,
        VmNaming::new("test-owner"),
        "ws://127.0.0.1:49134".into(),
    );
    World {
        sandbox,
        bus,
        manager,
    }
}

async fn run(w: &World, payload: Value) -> Result<Value, WorkerError> {
    functions::run::handle(&w.manager, &Caller::Trusted, payload)
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

/// A kept python run of `code`: its `runtime_id`.
async fn kept(w: &World, code: &str) -> String {
    let out = run(w, json!({"lang": "python", "code": code, "keep": true}))
        .await
        .expect("a kept run");
    out["runtime_id"]
        .as_str()
        .expect("a runtime_id")
        .to_string()
}

fn code_of(r: &Result<Value, WorkerError>) -> Option<ErrorCode> {
    r.as_ref().err().map(WorkerError::code)
}

#[tokio::test]
async fn one_shot_costs_create_exec_stop_and_returns_no_runtime_id() {
    let w = world();
    let out = run(&w, json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
    assert_eq!(out["success"], true);
    assert!(out.get("runtime_id").is_none());
    assert_eq!(w.sandbox.ops(), vec!["create python", "exec", "stop"]);
    assert_eq!(w.sandbox.live(), 0);
}

#[tokio::test]
async fn code_naming_iii_gets_the_sdk_first() {
    let w = world();
    run(&w, json!({"lang": "node", "code": "await iii.trigger({})"}))
        .await
        .unwrap();
    assert_eq!(
        w.sandbox.ops(),
        vec![
            "create node",
            "write /node_modules/iii-sdk/dist/index.mjs",
            "exec",
            "stop"
        ]
    );
}

#[tokio::test]
async fn keep_returns_an_id_and_reuse_echoes_it() {
    let w = world();
    let id = kept(&w, "x").await;
    assert!(id.starts_with("rt-"));
    assert!(
        !id.contains("00000000-0000-4000"),
        "runtime id is not derived from the sandbox id"
    );
    assert_eq!(w.sandbox.live(), 1);
    let again = run(&w, json!({"runtime_id": id, "code": "y"}))
        .await
        .unwrap();
    assert_eq!(again["runtime_id"], id.as_str());
    assert_eq!(w.sandbox.ops(), vec!["create python", "exec", "exec"]);
}

#[rstest]
#[case::nonzero_exit(Ok(ok_out("", 1)), None)]
#[case::timeout(
    Err(daemon("S200", "exec timed out after 5 ms")),
    Some(ErrorCode::Timeout)
)]
#[tokio::test]
async fn a_failed_keep_run_leaves_no_vm(
    #[case] outcome: Result<ExecOutput, SandboxError>,
    #[case] error: Option<ErrorCode>,
) {
    let w = world();
    w.sandbox.on_exec(move |_| outcome.clone());
    let r = run(&w, json!({"lang": "node", "code": "x", "keep": true})).await;
    assert_eq!(code_of(&r), error);
    if let Ok(v) = &r {
        assert!(v.get("runtime_id").is_none());
        assert_eq!(v["success"], false);
    }
    assert_eq!(w.sandbox.live(), 0);
    assert_eq!(w.manager.runtime_count(), 0);
}

#[rstest]
#[case::timeout(daemon("S200", "exec timed out"), ErrorCode::Timeout)]
#[case::capacity(daemon("S400", "resource limit exceeded"), ErrorCode::Capacity)]
#[case::image(daemon("S100", "image 'x' not in catalog"), ErrorCode::Engine)]
#[case::boot(daemon("S300", "VM boot failed"), ErrorCode::Engine)]
#[case::pull(daemon("S102", "pull failed"), ErrorCode::Engine)]
#[case::not_installed(SandboxError::NotInstalled, ErrorCode::Engine)]
#[case::bus(SandboxError::Bus(BusError::new("TIMEOUT", "x")), ErrorCode::Engine)]
#[tokio::test]
async fn daemon_failures_map_to_worker_codes(#[case] e: SandboxError, #[case] code: ErrorCode) {
    let w = world();
    *w.sandbox.create_error.lock().unwrap() = Some(e.clone());
    let r = run(&w, json!({"lang": "python", "code": "x"})).await;
    assert_eq!(code_of(&r), Some(code));
    let (_, message) = r.unwrap_err().to_wire();
    if let Some(s) = e.s_code() {
        if code == ErrorCode::Engine {
            assert!(message.contains(s), "the S-code is kept: {message}");
        }
    }
    if matches!(e, SandboxError::NotInstalled) {
        assert!(
            message.contains("compose::add worker=iii-sandbox"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn exec_errors_on_one_shot_stop_the_vm_and_hide_sandbox_ids() {
    let w = world();
    w.sandbox.on_exec(|_| {
        Err(daemon(
            "S300",
            "vm 00000000-0000-4000-8000-000000000001 died",
        ))
    });
    let r = run(&w, json!({"lang": "python", "code": "x"})).await;
    let (_, message) = r.unwrap_err().to_wire();
    assert!(!message.contains("00000000-0000-4000-8000"), "{message}");
    assert_eq!(w.sandbox.live(), 0);
}

#[rstest]
#[case::no_lang(json!({"code": "x"}), "lang")]
#[case::empty_code(json!({"lang": "node", "code": ""}), "code")]
#[case::big_code(json!({"lang": "node", "code": "x".repeat((1 << 20) + 1)}), "code")]
#[case::bad_lang(json!({"lang": "ruby", "code": "x"}), "lang")]
#[case::bad_type(json!({"lang": "node", "code": "x", "keep": "yes"}), "keep")]
#[tokio::test]
async fn bad_run_input_names_the_field(#[case] payload: Value, #[case] field: &str) {
    let w = world();
    let r = run(&w, payload).await;
    match r {
        Err(WorkerError::InvalidRequest(m)) => assert!(m.contains(field), "{m}"),
        other => panic!("expected invalid_request, got {other:?}"),
    }
    assert!(w.sandbox.ops().is_empty());
}

#[tokio::test]
async fn reuse_errors_unknown_mismatch_and_expiry() {
    let w = world();
    let r = run(&w, json!({"runtime_id": "rt-nope", "code": "x"})).await;
    assert_eq!(code_of(&r), Some(ErrorCode::RuntimeNotFound));

    let id = kept(&w, "x").await;
    let r = run(&w, json!({"runtime_id": id, "lang": "node", "code": "x"})).await;
    assert_eq!(code_of(&r), Some(ErrorCode::InvalidRequest));

    w.sandbox.reap_all();
    let r = run(&w, json!({"runtime_id": id, "code": "x"})).await;
    assert_eq!(code_of(&r), Some(ErrorCode::Expired));
    let r = run(&w, json!({"runtime_id": id, "code": "x"})).await;
    assert_eq!(
        code_of(&r),
        Some(ErrorCode::RuntimeNotFound),
        "the id is forgotten after expiry"
    );
}

#[tokio::test]
async fn runs_on_one_runtime_are_serialized_and_runtimes_run_in_parallel() {
    let w = world();
    let (a, b) = (kept(&w, "x").await, kept(&w, "x").await);
    w.sandbox.max_in_flight.store(0, Ordering::SeqCst);
    let same: Vec<_> = (0..4)
        .map(|_| run(&w, json!({"runtime_id": a, "code": "x"})))
        .collect();
    for r in futures_util::future::join_all(same).await {
        r.unwrap();
    }
    assert_eq!(
        w.sandbox.max_in_flight.load(Ordering::SeqCst),
        1,
        "one exec at a time per runtime"
    );
    w.sandbox.max_in_flight.store(0, Ordering::SeqCst);
    let (ra, rb) = tokio::join!(
        run(&w, json!({"runtime_id": a, "code": "x"})),
        run(&w, json!({"runtime_id": b, "code": "x"}))
    );
    ra.unwrap();
    rb.unwrap();
    assert_eq!(
        w.sandbox.max_in_flight.load(Ordering::SeqCst),
        2,
        "different runtimes overlap"
    );
}

async fn register(w: &World, payload: Value) -> Result<Value, WorkerError> {
    functions::register::handle(&w.manager, &Caller::Trusted, payload)
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

/// Publishes `a::f`, the python handler `DOUBLE`.
async fn register_double(w: &World) {
    register(
        w,
        json!({"function_id": "a::f", "lang": "python", "source": DOUBLE}),
    )
    .await
    .expect("a::f is published");
}

async fn teardown(w: &World, payload: Value) -> Result<Value, WorkerError> {
    functions::teardown::handle(&w.manager, &Caller::Trusted, payload)
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

const DOUBLE: &str = "def handler(payload):\n    return {'doubled': payload['n'] * 2}\n";

#[tokio::test]
async fn register_publishes_and_calls_return_the_handler_value() {
    let w = world();
    let out = register(
        &w,
        json!({"function_id": "my-app::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        json!({"function_id": "my-app::double", "registered": true})
    );
    assert_eq!(w.bus.ids(), vec!["my-app::double"]);
    let seen = Arc::new(Mutex::new(Value::Null));
    let seen2 = seen.clone();
    w.sandbox.on_exec(move |p| {
        let stdin: Value = serde_json::from_slice(p.stdin.as_deref().unwrap()).unwrap();
        *seen2.lock().unwrap() = stdin["payload"].clone();
        Ok(frame_for(p, "ok", &json!({"doubled": 42})))
    });
    let v = w
        .bus
        .call_published(
            "my-app::double",
            json!({"n": 21, "_caller_worker_id": "w1"}),
        )
        .await
        .unwrap();
    assert_eq!(v, json!({"doubled": 42}));
    assert_eq!(
        *seen.lock().unwrap(),
        json!({"n": 21}),
        "_caller_worker_id is stripped"
    );
    // One runtime per namespace and language: a second function reuses it.
    register(
        &w,
        json!({"function_id": "my-app::triple", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    let creates = w
        .sandbox
        .ops()
        .iter()
        .filter(|o| o.starts_with("create"))
        .count();
    assert_eq!(creates, 1);
    register(&w, json!({"function_id": "my-app::js", "lang": "node", "source": "export function handler(p){return p}"})).await.unwrap();
    let creates = w
        .sandbox
        .ops()
        .iter()
        .filter(|o| o.starts_with("create"))
        .count();
    assert_eq!(creates, 2, "a second language gets its own runtime");
}

#[rstest]
#[case::throw("throw", ErrorCode::HandlerError)]
#[case::not_json("not_json", ErrorCode::HandlerError)]
#[tokio::test]
async fn handler_failures_are_handler_errors(#[case] kind: &'static str, #[case] code: ErrorCode) {
    let w = world();
    register_double(&w).await;
    w.sandbox.on_exec(move |p| {
        Ok(frame_for(
            p,
            "err",
            &json!({"type": kind, "message": "boom"}),
        ))
    });
    let r = w.bus.call_published("a::f", json!({})).await;
    assert_eq!(r.unwrap_err().code(), code);
}

#[tokio::test]
async fn a_forged_frame_is_not_a_result() {
    let w = world();
    register_double(&w).await;
    w.sandbox.on_exec(|_| {
        Ok(ok_out(
            "\u{1e}SCR1 00000000000000000000000000000000 ok {\"pwned\":1}\n",
            0,
        ))
    });
    let r = w.bus.call_published("a::f", json!({})).await;
    assert_eq!(r.unwrap_err().code(), ErrorCode::HandlerError);
}

#[rstest]
#[case::no_handler("no_handler")]
#[case::async_handler("async_handler")]
#[case::load_error("load_error")]
#[tokio::test]
async fn sources_without_a_handler_are_refused_and_leave_no_vm(#[case] kind: &'static str) {
    let w = world();
    w.sandbox
        .on_exec(move |p| Ok(frame_for(p, "err", &json!({"type": kind, "message": "m"}))));
    let r = register(
        &w,
        json!({"function_id": "a::f", "lang": "python", "source": "x = 1"}),
    )
    .await;
    assert_eq!(code_of(&r), Some(ErrorCode::InvalidRequest));
    assert!(w.bus.ids().is_empty(), "never published");
    assert_eq!(w.sandbox.live(), 0);
}

#[rstest]
#[case::no_sep("nosep")]
#[case::reserved("sandbox-code-runner::x")]
#[case::caps("App::x")]
#[case::empty_name("app::")]
#[tokio::test]
async fn bad_function_ids_are_refused(#[case] id: &str) {
    let w = world();
    let r = register(
        &w,
        json!({"function_id": id, "lang": "python", "source": DOUBLE}),
    )
    .await;
    assert_eq!(code_of(&r), Some(ErrorCode::InvalidRequest));
    assert!(w.sandbox.ops().is_empty());
}

#[tokio::test]
async fn taken_ids_are_refused_across_languages_and_workers() {
    let w = world();
    register_double(&w).await;
    let r = register(
        &w,
        json!({"function_id": "a::f", "lang": "node", "source": "export const handler = p => p"}),
    )
    .await;
    assert_eq!(code_of(&r), Some(ErrorCode::InvalidRequest));
    w.bus.taken.lock().unwrap().insert("other::f".into());
    let r = register(
        &w,
        json!({"function_id": "other::f", "lang": "python", "source": DOUBLE}),
    )
    .await;
    assert_eq!(code_of(&r), Some(ErrorCode::InvalidRequest));
}

#[tokio::test]
async fn a_reaped_namespace_runtime_expires_its_functions() {
    let w = world();
    register_double(&w).await;
    register(
        &w,
        json!({"function_id": "a::g", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    w.sandbox.reap_all();
    let r = w.bus.call_published("a::f", json!({})).await;
    assert_eq!(r.unwrap_err().code(), ErrorCode::Expired);
    assert!(
        w.bus.ids().is_empty(),
        "every function of the runtime is unregistered"
    );
    let r = teardown(&w, json!({"namespace": "a"})).await;
    assert_eq!(code_of(&r), Some(ErrorCode::RuntimeNotFound));
    // The next registration boots a fresh runtime.
    register_double(&w).await;
    assert_eq!(w.sandbox.live(), 1);
}

#[tokio::test]
async fn teardown_by_runtime_and_by_namespace() {
    let w = world();
    let id = kept(&w, "x").await;
    let t = teardown(&w, json!({"runtime_id": id})).await.unwrap();
    assert_eq!(
        t,
        json!({"runtime_id": id, "torn_down": true, "unregistered": []})
    );
    let r = teardown(&w, json!({"runtime_id": id})).await;
    assert_eq!(code_of(&r), Some(ErrorCode::RuntimeNotFound));

    register(
        &w,
        json!({"function_id": "my-app::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    register(&w, json!({"function_id": "my-app::js", "lang": "node", "source": "export const handler = p => p"})).await.unwrap();
    let t = teardown(&w, json!({"namespace": "my-app"})).await.unwrap();
    assert_eq!(
        t,
        json!({"namespace": "my-app::", "torn_down": true, "unregistered": ["my-app::double", "my-app::js"]})
    );
    assert_eq!(w.sandbox.live(), 0);
    assert!(w.bus.ids().is_empty());
}

#[rstest]
#[case::both(json!({"runtime_id": "rt-x", "namespace": "a"}))]
#[case::neither(json!({}))]
#[case::bad_ns(json!({"namespace": "A B"}))]
#[tokio::test]
async fn teardown_refuses_both_neither_and_bad_namespaces(#[case] payload: Value) {
    let w = world();
    let r = teardown(&w, payload).await;
    match r {
        Err(WorkerError::InvalidRequest(m)) => {
            assert!(m.contains("runtime_id") || m.contains("namespace"), "{m}")
        }
        other => panic!("expected invalid_request, got {other:?}"),
    }
}

#[tokio::test]
async fn shutdown_stops_every_vm_and_sweep_finds_orphans() {
    let w = world();
    kept(&w, "x").await;
    register_double(&w).await;
    assert_eq!(w.sandbox.live(), 2);
    // A successor process of the same owner sees both as orphans.
    let successor = Manager::new(
        w.sandbox.clone(),
        w.bus.clone(),
        Config::default(),
        VmNaming::new("test-owner"),
        "ws://127.0.0.1:49134".into(),
    );
    let other_owner = Manager::new(
        w.sandbox.clone(),
        w.bus.clone(),
        Config::default(),
        VmNaming::new("someone-else"),
        "ws://127.0.0.1:49134".into(),
    );
    assert_eq!(other_owner.sweep_orphans().await.unwrap(), 0);
    assert_eq!(successor.sweep_orphans().await.unwrap(), 2);
    assert_eq!(w.sandbox.live(), 0);

    let w = world();
    kept(&w, "x").await;
    register_double(&w).await;
    w.manager.shutdown().await;
    assert_eq!(w.sandbox.live(), 0);
    assert!(w.bus.ids().is_empty());
}

/// The ledger keeps a VM that a teardown is stopping: a shutdown that
/// starts meanwhile still sees it, stops it and reports clean only once it
/// is gone (before, the VM was in no ledger while its stop ran, and the
/// shutdown reported clean with it alive).
#[tokio::test]
async fn a_shutdown_during_a_teardowns_stop_still_stops_that_vm() {
    let w = world();
    let rt = kept(&w, "print(1)").await;
    let vm = w.sandbox.live_ids().pop().expect("the kept VM");
    let (entered, release) = w.sandbox.hold_next_stop(&vm);
    let m = w.manager.clone();
    let teardown = tokio::spawn(async move {
        functions::teardown::handle(&m, &Caller::Trusted, json!({"runtime_id": rt})).await
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the teardown's stop started");
    // The record is gone and the stop is in flight.
    assert_eq!(w.manager.runtime_count(), 0);
    let report = w.manager.shutdown_within(Duration::from_secs(5)).await;
    assert_eq!(report.left, 0, "{report:?}");
    assert_eq!(report.stopped, 1, "the stopping VM was counted: {report:?}");
    assert!(
        w.sandbox.live_ids().is_empty(),
        "shutdown left {vm} running"
    );
    release.notify_one();
    let answer = teardown.await.unwrap().expect("the teardown answers");
    assert!(answer.torn_down);
}

#[tokio::test]
async fn timeouts_are_clamped_on_the_way_to_the_daemon() {
    let w = world();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    w.sandbox.on_exec(move |p| {
        seen2.lock().unwrap().push(p.timeout_ms);
        Ok(ok_out("", 0))
    });
    for t in [json!(null), json!(0), json!(1000), json!(10_000_000)] {
        run(&w, json!({"lang": "python", "code": "x", "timeout_ms": t}))
            .await
            .unwrap();
    }
    assert_eq!(*seen.lock().unwrap(), vec![5_000, 5_000, 1_000, 30_000]);
}

// ---- the fast path: warm pool, background stop, cost accounting ----

/// Waits on a condition of the in-memory world, with a deadline.
async fn eventually(mut probe: impl FnMut() -> bool) -> bool {
    code_runner_conformance::standin::wait::until(Duration::from_secs(2), || {
        let met = probe();
        async move { met }
    })
    .await
}

fn pooled(size: usize) -> World {
    world_with(Config {
        warm_pool: size,
        ..Config::default()
    })
}

fn stats(w: &World) -> Value {
    w.manager.stats().to_json()
}

/// (ops, sandbox calls, bytes planted) of one kind of operation.
fn counts(w: &World, op: &str) -> (u64, u64, u64) {
    let s = &stats(w)[op];
    (
        s["ops"].as_u64().unwrap(),
        s["sandbox_calls"].as_u64().unwrap(),
        s["bytes_planted"].as_u64().unwrap(),
    )
}

/// Runs a one-shot through the metered bus handler, as the bus does.
async fn metered_run(w: &World, payload: Value) -> Value {
    functions::publish_all(w.bus.as_ref(), &w.manager);
    w.bus.call_published(functions::RUN, payload).await.unwrap()
}

#[tokio::test]
async fn calls_per_operation_are_pinned() {
    // Without a pool: create + exec + the VM's lifeline + stop, nothing more.
    let w = world();
    metered_run(&w, json!({"lang": "python", "code": "print(2+2)"})).await;
    assert_eq!(counts(&w, "run"), (1, 4, 0));
    // A kept run: create + exec, no lifeline; reuse: one exec.
    let kept = metered_run(&w, json!({"lang": "python", "code": "x", "keep": true})).await;
    metered_run(&w, json!({"runtime_id": kept["runtime_id"], "code": "x"})).await;
    assert_eq!(stats(&w)["run"]["sandbox_calls"], 4 + 2 + 1);
    assert_eq!(w.sandbox.lifelines(), 1, "only the one-shot run has one");
    // A handler call: one exec.
    register_double(&w).await;
    w.bus.call_published("a::f", json!({"n": 1})).await.unwrap();
    assert_eq!(counts(&w, "handler_call"), (1, 1, 0));
    // The inventory: one list, charged like everything else.
    w.bus
        .call_published("sandbox-code-runner::list_runtimes", json!({}))
        .await
        .unwrap();
    assert_eq!(counts(&w, "inventory"), (1, 1, 0));
    // Node code that names iii: the bundle is planted, and counted.
    metered_run(&w, json!({"lang": "node", "code": "iii"})).await;
    let planted = stats(&w)["run"]["bytes_planted"].as_u64().unwrap();
    assert_eq!(
        planted,
        sandbox_code_runner::guest::NODE_SDK_BUNDLE.len() as u64
    );
}

#[tokio::test]
async fn a_warm_vm_serves_one_run_and_the_pool_refills() {
    let w = pooled(1);
    w.manager.start_pool();
    assert!(eventually(|| w.manager.pool_ready(Lang::Python) == 1).await);
    assert!(eventually(|| w.manager.pool_ready(Lang::Node) == 1).await);
    let out = metered_run(&w, json!({"lang": "python", "code": "print(2+2)"})).await;
    assert_eq!(out["stdout"], "4\n");
    // The caller's path: exec, its VM's lifeline, stop; the boot was paid
    // by the pool.
    assert_eq!(stats(&w)["run"]["sandbox_calls"], 3);
    assert!(
        eventually(|| w.manager.pool_ready(Lang::Python) == 1).await,
        "refilled"
    );
    assert_eq!(
        w.sandbox.live(),
        2,
        "one warm VM per language, the used one stopped"
    );
    // A kept runtime takes a warm VM and keeps it: never shared.
    let kept = metered_run(&w, json!({"lang": "python", "code": "x", "keep": true})).await;
    assert!(kept["runtime_id"].is_string());
    assert!(eventually(|| w.sandbox.live() == 3).await);
    w.manager.shutdown().await;
    assert_eq!(w.sandbox.live(), 0, "shutdown stops pooled VMs too");
}

#[tokio::test]
async fn capacity_pressure_drains_the_pool_first() {
    let w = pooled(1);
    w.manager.start_pool();
    // Both pooled VMs ready (booted and prepared), not merely created: a
    // run finding its language's VM still warming would create a third.
    assert!(
        eventually(|| {
            w.manager.pool_ready(Lang::Node) == 1 && w.manager.pool_ready(Lang::Python) == 1
        })
        .await
    );
    assert_eq!(w.sandbox.live(), 2);
    *w.sandbox.capacity.lock().unwrap() = Some(3);
    let a = metered_run(&w, json!({"lang": "node", "code": "x", "keep": true})).await;
    assert!(a["runtime_id"].is_string());
    // Full now (kept + warm VMs); a python one-shot still gets served.
    let out = metered_run(&w, json!({"lang": "python", "code": "x", "keep": true})).await;
    assert!(out["runtime_id"].is_string(), "{out}");
    let r = run(&w, json!({"lang": "python", "code": "x", "keep": true})).await;
    let r = if r.is_ok() {
        run(&w, json!({"lang": "python", "code": "x", "keep": true})).await
    } else {
        r
    };
    assert_eq!(
        code_of(&r),
        Some(ErrorCode::Capacity),
        "only a truly full daemon is `capacity`"
    );
}

#[tokio::test]
async fn a_reaped_warm_vm_is_replaced_silently() {
    let w = pooled(1);
    w.manager.start_pool();
    assert!(eventually(|| w.manager.pool_ready(Lang::Python) == 1).await);
    w.sandbox.reap_all();
    let out = run(&w, json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
}

#[tokio::test]
async fn background_stop_answers_first_then_stops() {
    let w = world_with(Config {
        warm_pool: 0,
        oneshot_stop: sandbox_code_runner::config::OneshotStop::Background,
        ..Config::default()
    });
    metered_run(&w, json!({"lang": "python", "code": "x"})).await;
    assert!(
        eventually(|| w.sandbox.live() == 0).await,
        "the VM is stopped after the answer"
    );
    assert!(
        eventually(|| stats(&w)["run"]["sandbox_calls"] == 3).await,
        "the stop is charged to the run"
    );
}

#[tokio::test]
async fn a_pool_that_could_not_fill_recovers_without_traffic() {
    let w = pooled(1);
    *w.sandbox.capacity.lock().unwrap() = Some(0);
    w.manager.start_pool();
    // Every refill is refused while the daemon is full.
    assert!(eventually(|| w.sandbox.creates() >= 2).await);
    assert_eq!(w.manager.pool_ready(Lang::Node), 0);
    *w.sandbox.capacity.lock().unwrap() = None;
    // The maintenance tick is 2 s: allow a few of them.
    let recovered =
        code_runner_conformance::standin::wait::until(Duration::from_secs(5), || async {
            w.manager.pool_ready(Lang::Node) == 1 && w.manager.pool_ready(Lang::Python) == 1
        })
        .await;
    assert!(recovered, "the maintenance loop refills the pool");
    w.manager.shutdown().await;
    assert_eq!(w.sandbox.live(), 0);
}

/// A python VM as the SDK steps see it: pip succeeds; `pack` reports a small
/// archive, `read` serves its slices; `unpack` succeeds when the key is the
/// VM's (`vm_key`), else answers 10 with the VM's key. Records each step.
fn python_sdk_vm(w: &World, vm_key: &'static str) -> Arc<Mutex<Vec<String>>> {
    use base64::Engine as _;
    use sandbox_code_runner::guest;
    use sha2::Digest as _;
    let archive: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let sha: String = sha2::Sha256::digest(&archive)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let seen = steps.clone();
    w.sandbox.on_exec(move |p| {
        let script = p.argv.get(2).map(String::as_str).unwrap_or("");
        let args: Vec<&str> = p.argv.iter().skip(3).map(String::as_str).collect();
        let step = if p.argv.first().map(String::as_str) == Some("true") {
            "warm".to_string()
        } else if script == guest::PYTHON_INSTALL_SDK {
            "pip".to_string()
        } else if script == guest::PYTHON_SDK_ARCHIVE {
            args[0].to_string()
        } else {
            "run".to_string()
        };
        seen.lock().unwrap().push(step.clone());
        Ok(match step.as_str() {
            "pack" => ok_out(
                &json!({"key": vm_key, "size": archive.len(), "sha256": sha}).to_string(),
                0,
            ),
            "read" => {
                let off: usize = args[2].parse().unwrap();
                let len: usize = args[3].parse().unwrap();
                let end = (off + len).min(archive.len());
                ok_out(
                    &base64::engine::general_purpose::STANDARD.encode(&archive[off..end]),
                    0,
                )
            }
            "unpack" if args[1] == vm_key && args[2] == sha => ok_out("unpacked\n", 0),
            "unpack" => ok_out(&format!("{vm_key}\n"), 10),
            _ => ok_out("4\n", 0),
        })
    });
    steps
}

fn take(steps: &Mutex<Vec<String>>) -> Vec<String> {
    std::mem::take(&mut *steps.lock().unwrap())
}

#[tokio::test]
async fn the_python_sdk_is_pip_installed_once_then_planted_from_the_archive() {
    let w = world();
    let steps = python_sdk_vm(&w, "cpython-3.11.2");
    let code = json!({"lang": "python", "code": "print(iii)"});
    metered_run(&w, code.clone()).await;
    assert_eq!(take(&steps), ["pip", "pack", "read", "run"]);
    let paid = w.manager.stats().to_json()["run"].clone();
    assert_eq!(paid["sdk_pip_installs"], 1, "{paid}");
    let before = w.sandbox.ops().len();
    metered_run(&w, code.clone()).await;
    assert_eq!(take(&steps), ["unpack", "run"], "no pip in the second VM");
    let ops = w.sandbox.ops()[before..].to_vec();
    assert!(
        ops.iter().any(|o| o == "write /tmp/.scr/sdk-chunks/c0"),
        "{ops:?}"
    );
    let s = w.manager.python_sdk().to_json();
    assert_eq!(
        (&s["pip_installs"], &s["plants"], &s["archives"]),
        (&json!(1), &json!(1), &json!(1))
    );
    let after = w.manager.stats().to_json()["run"].clone();
    assert_eq!(
        (&after["sdk_pip_installs"], &after["sdk_install_ns"]),
        (&paid["sdk_pip_installs"], &paid["sdk_install_ns"]),
        "the second run paid no install"
    );
}

#[tokio::test]
async fn a_vm_whose_python_differs_falls_back_to_pip() {
    let w = world();
    let steps = python_sdk_vm(&w, "cpython-3.11.2");
    let code = json!({"lang": "python", "code": "print(iii)"});
    run(&w, code.clone()).await.unwrap();
    take(&steps);
    // The next VM reports another interpreter: the archive is refused there.
    let steps = python_sdk_vm(&w, "cpython-3.12.1");
    run(&w, code.clone()).await.unwrap();
    assert_eq!(take(&steps), ["unpack", "pip", "pack", "read", "run"]);
    let s = w.manager.python_sdk().to_json();
    assert_eq!(s["key_mismatches"], 1);
    assert_eq!(s["archives"], 2, "one archive per interpreter key");
}

#[tokio::test]
async fn a_vm_that_ran_tenant_code_is_never_archived() {
    let w = world();
    let steps = python_sdk_vm(&w, "cpython-3.11.2");
    let rid = kept(&w, "x = 1").await;
    run(&w, json!({"runtime_id": rid, "code": "print(iii)"}))
        .await
        .unwrap();
    assert_eq!(take(&steps), ["run", "pip", "run"], "installed, not packed");
    assert_eq!(w.manager.python_sdk().to_json()["archives"], 0);
}

#[tokio::test]
async fn pooled_python_vms_get_the_archived_sdk_before_any_tenant() {
    let w = pooled(1);
    let steps = python_sdk_vm(&w, "cpython-3.11.2");
    w.manager.start_pool();
    assert!(eventually(|| w.manager.pool_ready(Lang::Python) == 1).await);
    // No archive yet: the pooled VM stays bare, and the first run to use
    // `iii` (in that pristine VM) pays the one pip install and the capture.
    assert_eq!(w.manager.pool_ready_with_sdk(), 0);
    let code = json!({"lang": "python", "code": "print(iii)"});
    run(&w, code.clone()).await.unwrap();
    // The refilled pooled VM gets the archive planted in the background.
    assert!(
        eventually(|| w.manager.pool_ready_with_sdk() == 1).await,
        "{:?}",
        take(&steps)
    );
    let before = take(&steps);
    assert_eq!(
        before.iter().filter(|s| *s == "pip").count(),
        1,
        "{before:?}"
    );
    assert!(before.contains(&"unpack".to_string()), "{before:?}");
    // The next run that uses `iii` takes that VM: no pip, no unpack, only
    // its own code.
    run(&w, code.clone()).await.unwrap();
    assert_eq!(take(&steps).first().map(String::as_str), Some("run"));
    let s = w.manager.python_sdk().to_json();
    assert_eq!(s["pip_installs"], 1, "{s}");
    w.manager.shutdown().await;
    assert_eq!(w.sandbox.live(), 0);
}

#[tokio::test]
async fn a_pooled_vm_warmed_after_the_capture_is_planted_too() {
    let w = pooled(2);
    let steps = python_sdk_vm(&w, "cpython-3.11.2");
    w.manager.start_pool();
    assert!(eventually(|| w.manager.pool_ready(Lang::Python) == 2).await);
    run(&w, json!({"lang": "python", "code": "print(iii)"}))
        .await
        .unwrap();
    assert!(eventually(|| w.manager.pool_ready_with_sdk() == 2).await);
    // Now take one planted VM and leave one bare VM warming back in.
    run(&w, json!({"lang": "python", "code": "print(1)"}))
        .await
        .unwrap();
    assert!(eventually(|| w.manager.pool_ready(Lang::Python) == 2).await);
    take(&steps);
    assert_eq!(
        w.manager.pool_ready_with_sdk(),
        2,
        "the refill is planted too"
    );
    w.manager.shutdown().await;
}

// ---------------------------------------------------------------------------
// One-shot stops: the answer waits until the VM is gone, not for the grace
// ---------------------------------------------------------------------------

/// The fake's VM ids are numbered from 1 in creation order.
fn nth_vm(n: usize) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn oneshot_world(stop: sandbox_code_runner::config::OneshotStop) -> World {
    world_with(Config {
        warm_pool: 0,
        prestart: false,
        oneshot_stop: stop,
        ..Config::default()
    })
}

async fn spawn_run(
    w: &World,
    payload: Value,
) -> tokio::task::JoinHandle<Result<Value, WorkerError>> {
    let m = w.manager.clone();
    tokio::spawn(async move {
        functions::run::handle(&m, &Caller::Trusted, payload)
            .await
            .map(|r| serde_json::to_value(r).unwrap())
    })
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 5 s"))
}

/// A one-shot run of the first VM, spawned; returns once the daemon's stop
/// of that VM has started and is held (release it with the notify).
async fn run_until_its_stop_is_held(
    w: &World,
) -> (
    tokio::task::JoinHandle<Result<Value, WorkerError>>,
    Arc<tokio::sync::Notify>,
) {
    let (entered, release) = w.sandbox.hold_next_stop(&nth_vm(1));
    let run = spawn_run(w, json!({"lang": "python", "code": "print(2+2)"})).await;
    within("the stop starts", entered.notified()).await;
    (run, release)
}

#[tokio::test]
async fn a_one_shot_answers_once_its_vm_is_gone_and_its_stop_finishes_after() {
    use sandbox_code_runner::config::OneshotStop;
    let w = oneshot_world(OneshotStop::BeforeResponse);
    let (run, release) = run_until_its_stop_is_held(&w).await;
    let out = within("the answer, while the daemon still sleeps its grace", run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
    assert_eq!(w.sandbox.lifelines(), 1);
    assert_eq!(
        w.sandbox.live(),
        1,
        "the daemon's entry lingers until its stop returns"
    );
    release.notify_one();
    assert!(
        eventually(|| w.sandbox.live() == 0).await,
        "the stop finishes"
    );
    let r = w.manager.shutdown().await;
    assert_eq!(
        w.sandbox.ops().iter().filter(|o| *o == "stop").count(),
        1,
        "{r:?}: stopped once"
    );
}

#[tokio::test]
async fn stop_confirmed_answers_only_once_the_daemon_confirms() {
    use sandbox_code_runner::config::OneshotStop;
    let w = oneshot_world(OneshotStop::StopConfirmed);
    let (run, release) = run_until_its_stop_is_held(&w).await;
    assert!(!run.is_finished(), "no answer while the stop is held");
    release.notify_one();
    within("the answer", run).await.unwrap().unwrap();
    assert_eq!(w.sandbox.live(), 0, "the entry went before the answer");
    assert_eq!(w.sandbox.lifelines(), 0, "no lifeline in this mode");
}

#[rstest]
#[case::killed_by_the_run(true, false)]
#[case::refused_by_the_daemon(false, true)]
#[tokio::test]
async fn a_lifeline_that_ended_otherwise_proves_nothing(
    #[case] killed: bool,
    #[case] refused: bool,
) {
    use sandbox_code_runner::config::OneshotStop;
    let w = oneshot_world(OneshotStop::BeforeResponse);
    w.sandbox.lifeline_killed.store(killed, Ordering::SeqCst);
    w.sandbox.lifeline_refused.store(refused, Ordering::SeqCst);
    let (run, release) = run_until_its_stop_is_held(&w).await;
    assert!(!run.is_finished(), "the answer waits for the stop");
    release.notify_one();
    within("the answer", run).await.unwrap().unwrap();
    assert_eq!(w.sandbox.live(), 0);
    // Refused once (one exec slot per sandbox): no lifeline is tried again.
    run_ok(&w).await;
    assert_eq!(w.sandbox.lifelines(), if refused { 1 } else { 2 });
}

async fn run_ok(w: &World) {
    let out = run(w, json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .expect("a one-shot run");
    assert_eq!(out["stdout"], "4\n");
}

#[tokio::test]
async fn a_run_refused_beside_its_lifeline_runs_again_without_lifelines() {
    let w = world();
    let refusals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = refusals.clone();
    w.sandbox.on_exec(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Err(daemon("S003", "sandbox is at its exec concurrency cap"))
        } else {
            Ok(ok_out("4\n", 0))
        }
    });
    run_ok(&w).await;
    assert_eq!(w.sandbox.creates(), 2, "once more on a fresh VM");
    assert_eq!(w.sandbox.live(), 0, "both VMs stopped");
    run_ok(&w).await;
    assert_eq!(
        w.sandbox.lifelines(),
        1,
        "lifelines are off after the refusal"
    );
}

#[tokio::test]
async fn a_create_refused_while_an_own_stop_lingers_waits_for_that_stop() {
    let w = world();
    *w.sandbox.capacity.lock().unwrap() = Some(1);
    let (entered, release) = w.sandbox.hold_next_stop(&nth_vm(1));
    run_ok(&w).await;
    within("the stop is under way", entered.notified()).await;
    let second = spawn_run(&w, json!({"lang": "python", "code": "print(2+2)"})).await;
    assert!(
        eventually(|| w.sandbox.creates() == 2).await,
        "the second run's create was refused"
    );
    assert!(!second.is_finished(), "it waits for the lingering stop");
    release.notify_one();
    let out = within("the second run", second).await.unwrap().unwrap();
    assert_eq!(out["stdout"], "4\n");
    assert_eq!(w.sandbox.live(), 0);
}

// ---- every VM has one owner: the table, the lease, the one stop ----

/// A VM still booting for the warm pool when the shutdown's budget runs
/// out is reported as left (so the process exits non-zero), not forgotten.
#[tokio::test]
async fn a_shutdown_during_a_pool_warm_up_reports_the_vm_left() {
    let w = pooled(1);
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.create_gate.lock().unwrap() = Some(gate.clone());
    w.manager.start_pool();
    assert!(
        eventually(|| w.sandbox.creates_waiting.load(Ordering::SeqCst) == 2).await,
        "both languages' creates are under way"
    );
    let report = w.manager.shutdown_within(Duration::from_millis(300)).await;
    assert_eq!(report.left, 2, "{report:?}");
    assert!(!report.is_clean());
    // Once the daemon answers, nothing is kept: a shutdown finds them.
    *w.sandbox.create_gate.lock().unwrap() = None;
    gate.notify_waiters();
    assert!(eventually(|| w.sandbox.live() == 2).await);
    let again = w.manager.shutdown().await;
    assert_eq!((again.stopped, again.left), (2, 0), "{again:?}");
    assert_eq!(w.sandbox.live(), 0);
}

/// A run whose caller gave up (its future dropped mid-exec) still stops
/// its VM: the lease it held schedules the stop when dropped.
#[tokio::test]
async fn a_run_whose_caller_gave_up_still_stops_its_vm() {
    let w = world();
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.exec_gate.lock().unwrap() = Some(gate);
    functions::publish_all(w.bus.as_ref(), &w.manager);
    let bus = w.bus.clone();
    let run = tokio::spawn(async move {
        bus.call_published(functions::RUN, json!({"lang": "python", "code": "x"}))
            .await
    });
    assert!(eventually(|| w.sandbox.execs_in_flight() == 1).await);
    run.abort();
    assert!(
        eventually(|| w.sandbox.live() == 0).await,
        "the dropped lease stopped the VM"
    );
    assert_eq!(
        counts(&w, "run").1,
        4,
        "create, exec, lifeline and the stop are all the run's"
    );
}

/// The shutdown and the boot's orphan sweep are operations like the rest:
/// their `sandbox::*` calls are charged, to `shutdown` and `sweep`.
#[tokio::test]
async fn shutdown_and_the_orphan_sweep_are_charged() {
    let w = world();
    kept(&w, "x = 1").await;
    kept(&w, "y = 2").await;
    let report = w.manager.shutdown().await;
    assert_eq!(report.stopped, 2);
    assert_eq!(counts(&w, "shutdown"), (1, 2, 0), "one stop per VM");

    // A predecessor of the same owner crashed with a VM running (its
    // manager never dropped, as in a crash); the next process sweeps it.
    let process = || World {
        manager: Manager::new(
            w.sandbox.clone(),
            w.bus.clone(),
            Config {
                warm_pool: 0,
                ..Config::default()
            },
            VmNaming::new("test-owner"),
            "ws://127.0.0.1:49134".into(),
        ),
        sandbox: w.sandbox.clone(),
        bus: w.bus.clone(),
    };
    let crashed = process();
    kept(&crashed, "z = 3").await;
    std::mem::forget(crashed.manager);
    let next = process();
    assert_eq!(next.manager.sweep_orphans().await.unwrap(), 1);
    assert_eq!(counts(&next, "sweep"), (1, 2, 0), "one list, one stop");
}

// ---- a namespace runtime serves its callers in parallel, in turn ----

/// Up to `handler_concurrency` calls of one runtime run at once (each its
/// own exec); more wait for a slot.
#[rstest]
#[case::default(Config::default().handler_concurrency)]
#[case::one_at_a_time(1)]
#[tokio::test]
async fn calls_of_one_runtime_run_in_parallel_up_to_its_slots(#[case] slots: usize) {
    let w = world_with(Config {
        warm_pool: 0,
        prestart: false,
        handler_concurrency: slots,
        ..Config::default()
    });
    register(
        &w,
        json!({"function_id": "par::f", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    w.sandbox.max_in_flight.store(0, Ordering::SeqCst);
    let calls: Vec<_> = (0..8)
        .map(|i| {
            w.bus
                .call_published("par::f", json!({"n": i, "_caller_worker_id": "w1"}))
        })
        .collect();
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.unwrap(), json!({"doubled": 42}));
    }
    assert_eq!(w.sandbox.max_in_flight.load(Ordering::SeqCst), slots);
}

/// The default slots are the daemon's execs per sandbox, whole, because
/// every exec the worker makes in a namespace runtime holds one of them: a
/// registration into a runtime whose every slot is busy waits its turn and
/// goes through, and the VM never has a fifth exec in flight (the daemon
/// would refuse it with S003).
#[tokio::test]
async fn a_registration_into_a_busy_runtime_waits_for_a_slot_never_a_fifth_exec() {
    const DAEMON_EXECS_PER_SANDBOX: usize = 4;
    assert_eq!(
        Config::default().handler_concurrency,
        DAEMON_EXECS_PER_SANDBOX
    );
    let w = world_with(Config {
        warm_pool: 0,
        prestart: false,
        ..Config::default()
    });
    register(
        &w,
        json!({"function_id": "busy::f", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    w.sandbox.max_in_flight.store(0, Ordering::SeqCst);
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.exec_gate.lock().unwrap() = Some(gate.clone());
    let finished = AtomicUsize::new(0);
    let bus = &w.bus;
    let calls = futures_util::future::join_all((0..8).map(|i| async move {
        bus.call_published("busy::f", json!({"i": i, "_caller_worker_id": "w1"}))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"))
    }));
    let calls = async {
        let r = calls.await;
        finished.fetch_add(8, Ordering::SeqCst);
        r
    };
    let registration = async {
        assert!(eventually(|| w.sandbox.execs_in_flight() == DAEMON_EXECS_PER_SANDBOX).await);
        let r = register(
            &w,
            json!({"function_id": "busy::g", "lang": "python", "source": DOUBLE}),
        )
        .await;
        finished.fetch_add(1, Ordering::SeqCst);
        r
    };
    let releases = async {
        assert!(eventually(|| w.sandbox.execs_in_flight() == DAEMON_EXECS_PER_SANDBOX).await);
        while finished.load(Ordering::SeqCst) < 9 {
            gate.notify_one();
            tokio::task::yield_now().await;
        }
    };
    let (calls, registration, ()) = tokio::join!(calls, registration, releases);
    assert_eq!(calls.len(), 8);
    registration.expect("the registration went through once a slot was free");
    assert_eq!(
        w.sandbox.max_in_flight.load(Ordering::SeqCst),
        DAEMON_EXECS_PER_SANDBOX,
        "never more execs in flight than the daemon admits"
    );
}

/// One caller's burst does not hold back another caller's single call: it
/// is served after one round of slots, not after the whole burst.
#[tokio::test]
async fn a_callers_burst_delays_another_callers_call_by_one_round() {
    let w = world_with(Config {
        warm_pool: 0,
        prestart: false,
        handler_concurrency: 2,
        ..Config::default()
    });
    register(
        &w,
        json!({"function_id": "fair::f", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.exec_gate.lock().unwrap() = Some(gate.clone());
    let order = Arc::new(Mutex::new(Vec::new()));
    let call = |who: &'static str, i: usize| {
        let (bus, order) = (w.bus.clone(), order.clone());
        tokio::spawn(async move {
            bus.call_published("fair::f", json!({"i": i, "_caller_worker_id": who}))
                .await
                .unwrap();
            order.lock().unwrap().push(who);
        })
    };
    let mut tasks: Vec<_> = (0..10).map(|i| call("burst", i)).collect();
    assert!(eventually(|| w.sandbox.execs_in_flight() == 2).await);
    tasks.push(call("single", 0));
    // Let every call through, one at a time, and see where "single" lands.
    for _ in 0..11 {
        gate.notify_one();
        let done = order.lock().unwrap().len();
        assert!(eventually(|| order.lock().unwrap().len() > done).await);
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let at = order.iter().position(|w| *w == "single").unwrap();
    assert!(
        at <= 3,
        "the single call waited {at} calls of the burst (2 slots): {order:?}"
    );
}

/// A teardown that lands while a registration's check exec runs: the
/// registration must not publish into the forgotten runtime. Afterwards the
/// id is either served (a call answers) or free (registering it works);
/// never on the bus with no runtime behind it, nor refused for good.
#[tokio::test]
async fn a_teardown_during_a_registrations_check_leaves_no_orphan_function() {
    let w = world();
    register_double(&w).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.exec_gate.lock().unwrap() = Some(gate.clone());
    let manager = w.manager.clone();
    let registering = tokio::spawn(async move {
        functions::register::handle(
            &manager,
            &Caller::Trusted,
            json!({"function_id": "a::g", "lang": "python", "source": DOUBLE}),
        )
        .await
    });
    assert!(eventually(|| w.sandbox.execs_in_flight() == 1).await);
    teardown(&w, json!({"namespace": "a"}))
        .await
        .expect("teardown");
    *w.sandbox.exec_gate.lock().unwrap() = None;
    gate.notify_waiters();
    let registered = registering.await.expect("the registration ends");
    if registered.is_ok() && w.bus.ids().contains(&"a::g".to_string()) {
        let out = w.bus.call_published("a::g", json!({"n": 2})).await;
        assert!(
            out.is_ok(),
            "a::g is on the bus, so a runtime serves it: {:?}",
            out.map_err(|e| e.code())
        );
    } else {
        assert!(!w.bus.ids().contains(&"a::g".to_string()), "{registered:?}");
        register(
            &w,
            json!({"function_id": "a::g", "lang": "python", "source": DOUBLE}),
        )
        .await
        .expect("a::g is free again");
    }
}

/// A one-shot run whose `sandbox::create` the daemon has not answered yet.
async fn a_run_waiting_on_its_create() -> (
    World,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<Result<(), WorkerError>>,
) {
    let w = world();
    let gate = Arc::new(tokio::sync::Notify::new());
    *w.sandbox.create_gate.lock().unwrap() = Some(gate.clone());
    let manager = w.manager.clone();
    let run = tokio::spawn(async move {
        functions::run::handle(
            &manager,
            &Caller::Trusted,
            json!({"lang": "python", "code": "x"}),
        )
        .await
        .map(drop)
    });
    assert!(eventually(|| w.sandbox.creates_waiting.load(Ordering::SeqCst) == 1).await);
    (w, gate, run)
}

fn let_the_create_answer(w: &World, gate: &tokio::sync::Notify) {
    *w.sandbox.create_gate.lock().unwrap() = None;
    gate.notify_one();
}

/// A caller that gives up while `sandbox::create` is in flight leaves no
/// VM: the create is owned from the moment it is sent, and the VM the
/// daemon boots for nobody is stopped once it answers.
#[tokio::test]
async fn a_caller_that_gives_up_during_a_create_leaves_no_vm() {
    let (w, gate, run) = a_run_waiting_on_its_create().await;
    run.abort();
    assert!(run.await.is_err(), "the caller gave up");
    let_the_create_answer(&w, &gate);
    assert!(
        eventually(|| w.sandbox.ops().iter().any(|o| o == "stop") && w.sandbox.live() == 0).await,
        "the VM booted for nobody was stopped: {:?}",
        w.sandbox.ops()
    );
}

/// A shutdown while an operation's create is in flight counts it: the VM
/// the daemon may be booting is left for the next boot's sweep, and the
/// report says so instead of claiming a clean exit.
#[tokio::test]
async fn a_shutdown_during_a_create_reports_it() {
    let (w, gate, run) = a_run_waiting_on_its_create().await;
    let report = w.manager.shutdown_within(Duration::from_millis(300)).await;
    assert_eq!(report.left, 1, "{report:?}");
    assert!(!report.is_clean());
    let_the_create_answer(&w, &gate);
    let _ = run.await;
    assert!(
        eventually(|| w.sandbox.live() == 0).await,
        "{:?}",
        w.sandbox.ops()
    );
}

/// A VM whose mounts the seal cannot make read-only runs nothing: the run
/// fails as the engine's (not the caller's code's) failure, saying why,
/// and its VM is stopped.
#[tokio::test]
async fn a_vm_that_cannot_be_sealed_runs_nothing() {
    let w = world();
    w.sandbox.seal_refuses.store(true, Ordering::SeqCst);
    let out = run(&w, json!({"lang": "python", "code": "print(1)"})).await;
    let e = out.expect_err("nothing ran");
    assert_eq!(e.code(), ErrorCode::Engine, "{e}");
    assert!(e.to_string().contains("read-only at /home"), "{e}");
    assert!(
        eventually(|| w.sandbox.live() == 0).await,
        "{:?}",
        w.sandbox.ops()
    );
}
