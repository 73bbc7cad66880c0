//! The stand-in engine driven by the Rust `iii-sdk` as a real client.
//!
//! The same assertions run against a real engine when `III_BIN` names its
//! binary (see `real_engine_fidelity`).

mod common;

use std::time::Duration;

use code_runner_conformance::standin::engine::StandInEngine;
use common::{client, wait_for};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::{Error, RegisterFunction};
use serde_json::{json, Value};

fn req(function_id: &str, payload: Value) -> TriggerRequest {
    TriggerRequest {
        function_id: function_id.to_string(),
        payload,
        action: None,
        timeout_ms: Some(5_000),
    }
}

fn remote_code(err: &Error) -> Option<String> {
    match err {
        Error::Remote { code, .. } => Some(code.clone()),
        _ => None,
    }
}

/// Waits until `function_id` answers something other than `function_not_found`.
async fn wait_visible(c: &iii_sdk::IIIClient, function_id: &str) {
    let visible = wait_for(Duration::from_secs(10), || async {
        let r = c
            .trigger(req(
                "engine::functions::info",
                json!({ "function_id": function_id }),
            ))
            .await;
        r.is_ok()
    })
    .await;
    assert!(visible, "{function_id} never became visible");
}

/// Runs every protocol check against the engine at `url`.
async fn protocol_checks(url: &str) {
    let worker = client(url, "proto-worker").await;
    let caller = client(url, "proto-caller").await;

    worker.register_function(
        "demo::echo",
        RegisterFunction::new_async(|input: Value| async move { Ok(json!({ "echo": input })) })
            .description("Echo the payload back")
            .request_format(json!({"type":"object","properties":{"msg":{"type":"string"}}}))
            .response_format(json!({"type":"object","properties":{"echo":{}}})),
    );
    worker.register_function(
        "demo::fail",
        RegisterFunction::new_async(|_input: Value| async move {
            Err::<Value, Error>(Error::Remote {
                code: "E_DEMO".into(),
                message: "demo failure".into(),
                stacktrace: None,
            })
        }),
    );
    wait_visible(&caller, "demo::echo").await;
    wait_visible(&caller, "demo::fail").await;

    // Round trip, with `_caller_worker_id` injected into the object payload.
    let out = caller
        .trigger(req("demo::echo", json!({ "msg": "hello" })))
        .await
        .expect("echo answers");
    assert_eq!(out["echo"]["msg"], "hello");
    assert!(
        out["echo"]["_caller_worker_id"].is_string(),
        "engine injects _caller_worker_id: {out}"
    );

    // Non-object payloads pass untouched.
    let out = caller
        .trigger(req("demo::echo", json!([1, 2, 3])))
        .await
        .expect("array payload answers");
    assert_eq!(out, json!({ "echo": [1, 2, 3] }));

    // A handler's error body arrives unchanged.
    let err = caller
        .trigger(req("demo::fail", json!({})))
        .await
        .expect_err("demo::fail fails");
    match &err {
        Error::Remote { code, message, .. } => {
            assert_eq!(code, "E_DEMO");
            assert_eq!(message, "demo failure");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }

    // function_not_found with the engine's message.
    let err = caller
        .trigger(req("demo::missing", json!({})))
        .await
        .expect_err("missing function fails");
    match &err {
        Error::Remote { code, message, .. } => {
            assert_eq!(code, "function_not_found");
            assert_eq!(
                message,
                "Function demo::missing not found in namespace default."
            );
        }
        other => panic!("expected function_not_found, got {other:?}"),
    }

    // engine::functions::info returns the registered schemas, renamed.
    let info = caller
        .trigger(req(
            "engine::functions::info",
            json!({ "function_id": "demo::echo" }),
        ))
        .await
        .expect("info answers");
    assert_eq!(info["function_id"], "demo::echo");
    assert_eq!(info["worker_name"], "proto-worker");
    assert_eq!(info["description"], "Echo the payload back");
    assert_eq!(
        info["request_schema"],
        json!({"type":"object","properties":{"msg":{"type":"string"}}})
    );
    assert_eq!(
        info["response_schema"],
        json!({"type":"object","properties":{"echo":{}}})
    );
    let err = caller
        .trigger(req(
            "engine::functions::info",
            json!({ "function_id": "nope::x" }),
        ))
        .await
        .expect_err("unknown id");
    assert_eq!(remote_code(&err).as_deref(), Some("NOT_FOUND"));
    let batch = caller
        .trigger(req(
            "engine::functions::info",
            json!({ "function_ids": ["demo::echo", "nope::x"] }),
        ))
        .await
        .expect("batch answers");
    assert_eq!(batch["functions"][0]["function_id"], "demo::echo");
    assert_eq!(
        batch["functions"][1],
        json!({"function_id": "nope::x", "error": "not_found"})
    );

    // A second live worker with a taken name is rejected and closed.
    let twin = iii_sdk::register_worker(
        url,
        iii_sdk::InitOptions {
            metadata: Some(iii_sdk::runtime::WorkerMetadata {
                name: "proto-worker".into(),
                telemetry: None,
                ..Default::default()
            }),
            identity: iii_sdk::WorkerIdentityMode::Explicit,
            ..Default::default()
        },
    );
    let rejected = wait_for(Duration::from_secs(10), || {
        let fatal = twin.fatal_error();
        async move {
            matches!(fatal, Some(Error::RegistrationRejected { ref code, .. }) if code == "WORKER_NAMESPACE_CONFLICT")
        }
    })
    .await;
    assert!(rejected, "a taken worker name is rejected");
    twin.shutdown_async().await;

    // A callee that disconnects mid-call: the caller gets invocation_stopped.
    let hanger = client(url, "proto-hanger").await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    hanger.register_function(
        "demo::hang",
        RegisterFunction::new_async(move |_input: Value| {
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            async move {
                std::future::pending::<()>().await;
                Ok::<Value, Error>(Value::Null)
            }
        }),
    );
    wait_visible(&caller, "demo::hang").await;
    let call = {
        let caller = caller.clone();
        tokio::spawn(async move { caller.trigger(req("demo::hang", json!({}))).await })
    };
    tokio::time::timeout(Duration::from_secs(10), started_rx)
        .await
        .expect("the handler starts")
        .expect("start signal");
    hanger.shutdown_async().await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the caller is answered")
        .expect("join");
    let err = outcome.expect_err("the call is stopped");
    assert_eq!(remote_code(&err).as_deref(), Some("invocation_stopped"));

    // Functions vanish with their worker's socket.
    worker.shutdown_async().await;
    let gone = wait_for(Duration::from_secs(10), || async {
        matches!(
            caller.trigger(req("demo::echo", json!({}))).await,
            Err(Error::Remote { ref code, .. }) if code == "function_not_found"
        )
    })
    .await;
    assert!(gone, "functions vanish when their worker disconnects");
    caller.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_sdk_against_stand_in() {
    let engine = StandInEngine::start(0).await.expect("engine starts");
    protocol_checks(&engine.url()).await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_fidelity() {
    let Some(bin) = std::env::var_os("III_BIN") else {
        eprintln!(
            "SKIPPED real_engine_fidelity: set III_BIN=/path/to/iii (a real engine binary) to run \
             the protocol checks against a real engine as well"
        );
        return;
    };
    // The real engine listens on its default port, 49134, when started
    // without a config; run it in a scratch directory so its state files
    // (./data, ./config) stay out of the work tree.
    let port = std::env::var("III_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(49134);
    let dir = std::env::temp_dir().join(format!("scr-real-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut child = tokio::process::Command::new(bin)
        .current_dir(&dir)
        .kill_on_drop(true)
        .spawn()
        .expect("real engine starts");
    let url = format!("ws://127.0.0.1:{port}");
    let up = wait_for(Duration::from_secs(30), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "real engine accepts connections on {url}");
    protocol_checks(&url).await;
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_is_answered_with_pong() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let engine = StandInEngine::start(0).await.expect("engine starts");
    let (mut ws, _) = tokio_tungstenite::connect_async(engine.url())
        .await
        .expect("connects");
    let hello = ws.next().await.expect("greeting").expect("frame");
    let hello: Value = serde_json::from_str(hello.to_text().unwrap()).unwrap();
    assert_eq!(hello["type"], "workerregistered");
    ws.send(Message::Text(r#"{"type":"ping"}"#.into()))
        .await
        .unwrap();
    let pong = ws.next().await.expect("pong").expect("frame");
    assert_eq!(pong.to_text().unwrap(), r#"{"type":"pong"}"#);
    ws.send(Message::Ping(vec![1u8, 2].into())).await.unwrap();
    let wspong = ws.next().await.expect("ws pong").expect("frame");
    assert!(matches!(wspong, Message::Pong(ref p) if p.as_ref() == [1u8, 2]));
    engine.shutdown().await;
}

/// The relay timings benches use to take the daemon's share out of a call:
/// each answered call appears once, with its callee's time inside the
/// caller's, and calls forwarded before `since` do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_record_when_each_call_was_forwarded_and_answered() {
    let engine = StandInEngine::start(0).await.expect("engine starts");
    let worker = client(&engine.url(), "relay-worker").await;
    let caller = client(&engine.url(), "relay-caller").await;
    worker.register_function(
        "relay::slow",
        RegisterFunction::new_async(|_input: Value| async move {
            // The callee's share under test: what the relay must contain.
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(json!({}))
        }),
    );
    wait_visible(&caller, "relay::slow").await;
    caller
        .trigger(req("relay::slow", json!({})))
        .await
        .expect("first call");

    let since = std::time::Instant::now();
    caller
        .trigger(req("relay::slow", json!({})))
        .await
        .expect("second call");
    let seen = since.elapsed();

    let relays: Vec<_> = engine
        .relays_since(since)
        .into_iter()
        .filter(|r| r.function_id == "relay::slow")
        .collect();
    assert_eq!(relays.len(), 1, "only the call made after `since`");
    let share = relays[0].answered_at - relays[0].forwarded_at;
    assert!(
        share >= Duration::from_millis(30),
        "the callee's 30 ms are inside its relay: {share:?}"
    );
    assert!(share <= seen, "the relay is inside what the caller saw");
    engine.shutdown().await;
}
