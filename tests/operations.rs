//! Operating the worker: the inventory, the lifecycle events and the console
//! page never carry a capability, and a supervisor's stop is bounded even
//! with the engine gone.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use code_runner_conformance::standin::engine::StandInEngine;
use code_runner_conformance::standin::sandbox_double::SandboxDouble;
use code_runner_conformance::suite::case::UrlVia;
use code_runner_conformance::suite::env::{WorkerCommand, WorkerProcess};
use common::{wait_for, Harness};
use iii_sdk::RegisterFunction;
use serde_json::{json, Value};

const LIST: &str = "sandbox-code-runner::list_runtimes";
const REGISTER: &str = "sandbox-code-runner::register_function";
const TEARDOWN: &str = "sandbox-code-runner::teardown";
const EVENT: &str = "sandbox-code-runner::event";

/// Binds a function of the test client to the lifecycle trigger type and
/// records what it receives.
struct Subscriber {
    received: Arc<Mutex<Vec<Value>>>,
    _function: iii_sdk::runtime::FunctionRef,
    _trigger: iii_sdk::trigger::Trigger,
}

impl Subscriber {
    fn bind(client: &iii_sdk::IIIClient, function_id: &str, config: Value) -> Subscriber {
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        let function = client.register_function(
            function_id,
            RegisterFunction::new_async(move |payload: Value| {
                let sink = sink.clone();
                async move {
                    sink.lock().unwrap().push(payload);
                    Ok::<Value, iii_sdk::Error>(json!({"ok": true}))
                }
            }),
        );
        #[allow(deprecated)] // the engine under test speaks trigger types
        let trigger = client
            .register_trigger(iii_sdk::protocol::RegisterTriggerInput {
                trigger_type: EVENT.into(),
                function_id: function_id.into(),
                config,
                metadata: None,
                namespace: None,
                trigger_namespace: None,
            })
            .expect("bind the subscriber");
        Subscriber {
            received,
            _function: function,
            _trigger: trigger,
        }
    }

    fn events(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }

    fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["event"].as_str().unwrap_or("?").to_string())
            .collect()
    }
}

/// `page.js` as embedded in the binary, rendered by node from `inventory`.
fn page_html(inventory: &Value) -> String {
    let dir = std::env::temp_dir().join(format!("scr-page-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (js, _) = sandbox_code_runner::ui::asset(sandbox_code_runner::ui::PAGE_PATH).unwrap();
    std::fs::write(dir.join("page.mjs"), js).unwrap();
    std::fs::write(dir.join("inventory.json"), inventory.to_string()).unwrap();
    let script = "import { renderPageToString } from './page.mjs';\n\
                  import { readFileSync } from 'node:fs';\n\
                  process.stdout.write(renderPageToString(JSON.parse(readFileSync('./inventory.json', 'utf8'))));\n";
    std::fs::write(dir.join("render.mjs"), script).unwrap();
    let out = std::process::Command::new("node")
        .arg("render.mjs")
        .current_dir(&dir)
        .output()
        .expect("node runs (the UI build needs it too)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "rendering the page failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn assert_absent(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !text.contains(s.as_str()),
            "{what} contains a secret id {s}"
        );
    }
    common::assert_no_runtime_ids(text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_runtimes_leave_no_capability_in_inventory_events_page_or_log() {
    let h = Harness::start("").await;
    let sub = Subscriber::bind(&h.client, "ops-test::on_event", json!({}));
    let bound = wait_for(Duration::from_secs(10), || async {
        h.log().contains("lifecycle subscriber bound")
    })
    .await;
    assert!(bound, "the engine hands the binding to the worker");

    // 12 kept runtimes (both languages), 4 namespaces × 2 languages.
    let mut runtime_ids = Vec::new();
    let mut sandbox_ids: Vec<String> = Vec::new();
    for i in 0..12 {
        let lang = if i % 3 == 0 { "node" } else { "python" };
        let code = if lang == "node" {
            "console.log(1)"
        } else {
            "print(1)"
        };
        let out = h
            .run(json!({"lang": lang, "code": code, "keep": true}))
            .await
            .unwrap();
        runtime_ids.push(out["runtime_id"].as_str().unwrap().to_string());
    }
    for ns in ["alpha", "beta", "gamma", "delta"] {
        h.call(
            REGISTER,
            json!({"function_id": format!("{ns}::py"), "lang": "python", "source": "def handler(p):\n    return p"}),
        )
        .await
        .unwrap();
        h.call(
            REGISTER,
            json!({"function_id": format!("{ns}::js"), "lang": "node", "source": "export function handler(p) { return p }"}),
        )
        .await
        .unwrap();
    }
    for id in &runtime_ids[..4] {
        h.run(json!({"runtime_id": id, "code": "print(2)"}))
            .await
            .ok();
    }
    sandbox_ids.extend(
        h.bench
            .sandbox()
            .expect("the harness runs the daemon double")
            .live()
            .into_iter()
            .map(|(id, _)| id),
    );
    assert_eq!(sandbox_ids.len(), 20, "20 runtimes, one VM each");

    let inventory = h.call(LIST, json!({})).await.unwrap();
    let rts = inventory["runtimes"].as_array().unwrap();
    assert_eq!(rts.len(), 20);
    assert!(rts.iter().all(|r| r["vm"] == "alive"), "{inventory:#}");
    assert_eq!(rts.iter().filter(|r| r["kind"] == "namespace").count(), 8);
    let alpha: Vec<&Value> = rts.iter().filter(|r| r["namespace"] == "alpha::").collect();
    assert_eq!(alpha.len(), 2);
    let mut handles: Vec<&str> = rts.iter().map(|r| r["handle"].as_str().unwrap()).collect();
    handles.sort();
    handles.dedup();
    assert_eq!(handles.len(), 20, "one distinct handle per runtime");

    let mut secrets = runtime_ids.clone();
    secrets.extend(sandbox_ids.iter().cloned());
    assert_absent("the inventory", &inventory.to_string(), &secrets);
    let html = page_html(&inventory);
    assert!(html.contains("alpha::") && html.contains(handles[0]));
    assert_absent("the page", &html, &secrets);

    // Tear everything down: by runtime id and by namespace.
    for id in &runtime_ids {
        h.call(TEARDOWN, json!({"runtime_id": id})).await.unwrap();
    }
    for ns in ["alpha", "beta", "gamma", "delta"] {
        h.call(TEARDOWN, json!({"namespace": ns})).await.unwrap();
    }
    // 20 created + 8 registered + 8 unregistered + 20 torn down.
    let all = wait_for(Duration::from_secs(20), || async {
        sub.events().len() >= 56
    })
    .await;
    assert!(all, "events: {:?}", sub.kinds());
    let kinds = sub.kinds();
    let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
    assert_eq!(count("runtime.created"), 20);
    assert_eq!(count("function.registered"), 8);
    assert_eq!(count("function.unregistered"), 8);
    assert_eq!(count("runtime.torn_down"), 20);
    let events = serde_json::to_string(&sub.events()).unwrap();
    assert_absent("the events", &events, &secrets);
    for h0 in &handles {
        assert!(events.contains(h0), "events name runtimes by handle");
    }
    let empty = h.call(LIST, json!({})).await.unwrap();
    assert_eq!(empty["runtimes"], json!([]));
    let log = h.log();
    assert_absent("the worker log", &log, &secrets);
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_reaped_behind_the_workers_back_shows_as_gone() {
    let h = Harness::start("").await;
    let id = h.kept().await;
    // The VM vanishes behind the worker's back (as a reap would): the
    // inventory says so from one sandbox::list.
    let (sandbox_id, _) = h
        .bench
        .sandbox()
        .expect("the harness runs the daemon double")
        .live()
        .pop()
        .unwrap();
    h.call("sandbox::stop", json!({"sandbox_id": sandbox_id}))
        .await
        .unwrap();
    let inv = h.call(LIST, json!({})).await.unwrap();
    assert_eq!(inv["runtimes"][0]["vm"], "gone", "{inv:#}");
    assert_eq!(inv["vm_check"], "ok");
    assert_eq!(inv["runtimes"][0]["executions"], 1);
    assert!(!inv.to_string().contains(&id));
    assert!(!inv.to_string().contains(&sandbox_id));
    h.finish(0).await;
}

/// SIGTERM with the engine already gone: the worker is out within 5 s, says
/// which VMs it left for the next boot's orphan sweep, and exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_the_engine_gone_exits_within_5s() {
    let engine = StandInEngine::start(0).await.expect("engine");
    let url = engine.url();
    let sandbox = SandboxDouble::start(&url, common::test_limits())
        .await
        .expect("sandbox double");
    let mut worker = WorkerProcess::spawn_with_env(
        &WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner")),
        &url,
        UrlVia::Flag,
        Some("warm_pool: 1\n"),
        None,
        &[("RUST_LOG", "info")],
    )
    .expect("worker starts");
    let client = code_runner_conformance::standin::client::connect(&url, "stop-caller")
        .await
        .unwrap();
    worker
        .wait_ready(&client, &["sandbox-code-runner::run".to_string()])
        .await
        .expect("worker ready");
    let out = client
        .trigger(iii_sdk::protocol::TriggerRequest {
            function_id: "sandbox-code-runner::run".into(),
            payload: json!({"lang": "python", "code": "print(1)", "keep": true}),
            action: None,
            timeout_ms: Some(60_000),
        })
        .await
        .expect("a kept run");
    assert!(out["runtime_id"].is_string(), "{out}");

    engine.shutdown().await;
    let sent = Instant::now();
    worker.terminate();
    let status = worker
        .wait_exit(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("still running 5 s after SIGTERM; log:\n{}", worker.log()));
    let took = sent.elapsed();
    let log = worker.log();
    assert_eq!(
        status.code(),
        Some(3),
        "an unclean shutdown says so in its exit status ({took:?}); log:\n{log}"
    );
    assert!(
        log.contains("left for the next boot's orphan sweep"),
        "the VMs left behind are logged:\n{log}"
    );
    common::assert_no_runtime_ids(&log);
    client.shutdown_async().await;
    sandbox.shutdown().await;
}

/// A subscriber whose function never answers costs only itself: the others
/// get each event at once, not after the stalled ones' delivery timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_never_delays_another() {
    let h = Harness::start("").await;
    let mut stalled = Vec::new();
    for i in 0..8 {
        let id = format!("ops-stall::never{i}");
        let function = h.client.register_function(
            id.as_str(),
            RegisterFunction::new_async(move |_payload: Value| async move {
                std::future::pending::<()>().await;
                Ok::<Value, iii_sdk::Error>(Value::Null)
            }),
        );
        #[allow(deprecated)] // the engine under test speaks trigger types
        let trigger = h
            .client
            .register_trigger(iii_sdk::protocol::RegisterTriggerInput {
                trigger_type: EVENT.into(),
                function_id: id.clone(),
                config: json!({}),
                metadata: None,
                namespace: None,
                trigger_namespace: None,
            })
            .expect("bind a stalled subscriber");
        stalled.push((function, trigger));
    }
    let sub = Subscriber::bind(&h.client, "ops-stall::prompt", json!({}));
    let bound = wait_for(Duration::from_secs(10), || async {
        h.log().matches("lifecycle subscriber bound").count() >= 9
    })
    .await;
    assert!(bound, "the engine hands all nine bindings to the worker");

    let started = Instant::now();
    h.call(
        REGISTER,
        json!({"function_id": "ops-stall-ns::f", "lang": "python", "source": "def handler(p):\n    return 1"}),
    )
    .await
    .expect("register");
    let registered = Instant::now();
    let arrived = wait_for(Duration::from_secs(3), || async {
        sub.kinds().iter().any(|k| k == "function.registered")
    })
    .await;
    assert!(
        arrived,
        "the prompt subscriber got `function.registered` within 3 s of the registration \
         (8 stalled subscribers, 5 s delivery timeout each); registration took {:?}",
        registered - started
    );
    h.call(TEARDOWN, json!({"namespace": "ops-stall-ns"}))
        .await
        .expect("teardown");
    drop(stalled);
}
