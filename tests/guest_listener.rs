//! The worker's side of the guest listener, end to end on the hermetic
//! bench (main listener on 127.0.0.2, guest listener on 127.0.0.1, the
//! double's gateway in between):
//!
//! - a guest's token is fresh, is not its runtime id, and is never logged;
//! - a one-shot run's token is revoked when the run returns, a kept
//!   runtime's when it is torn down, a namespace runtime's with its namespace;
//! - the issue's breach (python, the exact code) fails;
//! - the boot warnings: no guest listener, and an engine URL guests reach.

mod common;

use std::time::Duration;

use code_runner_conformance::standin::wait::until;
use code_runner_conformance::suite::case::UrlVia;
use code_runner_conformance::suite::env::{WorkerCommand, WorkerProcess};
use common::Harness;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// What the guest listener says to a connection carrying `token`: the
/// type of its first frame (`workerregistered` when admitted, `error` with
/// `AUTH_ERROR` when refused).
async fn first_frame(guest_url: &str, token: &str) -> Value {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{guest_url}/?token={token}"))
        .await
        .expect("the guest listener upgrades");
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")
            .expect("a frame")
            .expect("no transport error");
        if let Message::Text(t) = frame {
            return serde_json::from_str(&t).expect("JSON");
        }
    }
}

fn token_of(out: &Value) -> String {
    let t = out["stdout"].as_str().expect("stdout").trim().to_string();
    assert!(t.len() >= 43, "a 256-bit token was printed: {out}");
    t
}

const PRINT_TOKEN: &str = "console.log(process.env.III_GUEST_TOKEN)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_fresh_secret_and_revoked_with_their_run_or_runtime() {
    let h = Harness::start("").await;
    let guest = h
        .bench
        .guest_url()
        .expect("the bench opens a guest listener");

    // One-shot: revoked by the time the caller has the response.
    let one = token_of(
        &h.run(json!({"lang": "node", "code": PRINT_TOKEN}))
            .await
            .unwrap(),
    );
    let refused = first_frame(&guest, &one).await;
    assert_eq!(refused["error"]["code"], "AUTH_ERROR", "{refused}");

    // Kept: one token for the runtime, valid until teardown.
    let kept = h
        .run(json!({"lang": "node", "keep": true, "code": PRINT_TOKEN}))
        .await
        .unwrap();
    let rt = kept["runtime_id"].as_str().unwrap().to_string();
    let token = token_of(&kept);
    assert_ne!(token, one, "fresh per run");
    assert!(
        !token.contains(&rt) && !rt.contains(&token),
        "never the runtime_id"
    );
    let again = h
        .run(json!({"runtime_id": rt, "code": PRINT_TOKEN}))
        .await
        .unwrap();
    assert_eq!(token_of(&again), token, "per runtime");
    assert_eq!(
        first_frame(&guest, &token).await["type"],
        "workerregistered"
    );
    h.call("sandbox-code-runner::teardown", json!({"runtime_id": rt}))
        .await
        .unwrap();
    assert_eq!(
        first_frame(&guest, &token).await["error"]["code"],
        "AUTH_ERROR",
        "revoked at teardown"
    );

    // A namespace runtime's handlers carry its token; teardown revokes it.
    h.call(
        "sandbox-code-runner::register_function",
        json!({"function_id": "tok::get", "lang": "node",
               "source": "export function handler() { return process.env.III_GUEST_TOKEN; }"}),
    )
    .await
    .unwrap();
    let ns_token = h.call("tok::get", json!({})).await.unwrap();
    let ns_token = ns_token.as_str().expect("a token").to_string();
    assert_eq!(
        first_frame(&guest, &ns_token).await["type"],
        "workerregistered"
    );
    h.call("sandbox-code-runner::teardown", json!({"namespace": "tok"}))
        .await
        .unwrap();
    assert_eq!(
        first_frame(&guest, &ns_token).await["error"]["code"],
        "AUTH_ERROR"
    );

    let log = h.log();
    for t in [&one, &token, &ns_token] {
        assert!(
            !log.contains(t.as_str()),
            "a guest token reached the worker log"
        );
    }
    h.finish(0).await;
}

/// The issue's breach, verbatim in python: B's one-shot run lists every
/// sandbox and execs `cat /tmp/secret` in each. Through the guest listener
/// it gets FORBIDDEN and never A's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issues_python_breach_fails() {
    let h = Harness::start("").await;
    let a = h
        .run(json!({"lang": "python", "keep": true,
                    "code": "open('/tmp/secret', 'w').write('tenant-a-secret')"}))
        .await
        .unwrap();
    let rt = a["runtime_id"].as_str().unwrap().to_string();
    let breach = "try:\n    for s in iii.trigger({\"function_id\": \"sandbox::list\", \"payload\": {}})[\"sandboxes\"]:\n        print(iii.trigger({\"function_id\": \"sandbox::exec\", \"payload\": {\"sandbox_id\": s[\"sandbox_id\"], \"cmd\": \"cat\", \"args\": [\"/tmp/secret\"]}}))\nexcept Exception as e:\n    print(type(e).__name__, getattr(e, 'code', None))\n";
    let b = h
        .run(json!({"lang": "python", "code": breach, "timeout_ms": 30000}))
        .await
        .unwrap();
    let out = b["stdout"].as_str().unwrap();
    assert!(!out.contains("tenant-a-secret"), "B read A's secret: {b}");
    assert!(out.contains("FORBIDDEN"), "B got FORBIDDEN: {b}");
    h.call("sandbox-code-runner::teardown", json!({"runtime_id": rt}))
        .await
        .unwrap();
    h.finish(0).await;
}

/// Starts the worker with `url` (and `guest_url` as `III_GUEST_URL`) and
/// reads its log until every `wanted` line fragment appeared (or 20 s
/// passed); returns what was read.
async fn boot_log(url: &str, guest_url: Option<&str>, wanted: &[&str]) -> String {
    let mut worker = WorkerProcess::spawn_with_env(
        &WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner")),
        url,
        UrlVia::Flag,
        None,
        guest_url.map(str::to_string),
        &[("RUST_LOG", "info")],
    )
    .expect("worker starts");
    until(Duration::from_secs(20), || {
        let log = worker.log();
        let met = wanted.iter().all(|x| log.contains(x));
        async move { met }
    })
    .await;
    let log = worker.log();
    worker.kill().await;
    log
}

const NO_LISTENER: &str = "no guest listener (guest_url) is configured";
const REACHABLE: &str = "is reachable from guest code";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_warns_when_guests_can_reach_every_sandbox() {
    // Default URL (127.0.0.1) and no guest listener: both warnings.
    let log = boot_log("ws://127.0.0.1:1", None, &[NO_LISTENER, REACHABLE]).await;
    assert!(log.contains(NO_LISTENER), "{log}");
    assert!(log.contains(REACHABLE), "{log}");
    assert!(
        log.contains("guest-listener-config"),
        "says how to close it: {log}"
    );

    // The recommended layout: neither.
    let log = boot_log(
        "ws://127.0.0.2:1",
        Some("ws://127.0.0.1:2"),
        &["guests connect through the guest listener"],
    )
    .await;
    assert!(
        log.contains("guests connect through the guest listener"),
        "{log}"
    );
    assert!(!log.contains(NO_LISTENER), "{log}");
    assert!(!log.contains(REACHABLE), "{log}");
}

#[test]
fn guest_listener_config_prints_the_engine_block() {
    let out = WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner"))
        .output(["guest-listener-config", "--port", "49135"])
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let rbac = &v["workers"][1]["config"]["rbac"];
    assert_eq!(
        rbac["auth_function_id"].as_str(),
        Some(sandbox_code_runner::guest_access::GUEST_AUTH)
    );
    assert_eq!(
        v["workers"][0]["config"]["host"].as_str(),
        Some("127.0.0.2")
    );
    assert_eq!(v["workers"][1]["config"]["port"].as_u64(), Some(49135));
}
