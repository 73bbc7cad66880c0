//! RBAC listeners, frame by frame: the stand-in's guest listener against
//! the behaviour measured on engine 0.23.0-rc.4 (`engine-protocol.md`, "A
//! second listener with RBAC"). With `III_BIN` naming a real engine binary,
//! the same checks run against it, started with the same two listeners.
//!
//! Compared frames: the AuthInput the auth function receives; the
//! `FORBIDDEN` `invocationresult` for each decision step (forbidden, allowed,
//! carve-out, exposed, denied) with both messages; the `error`/`AUTH_ERROR`
//! frame of a refused connection; the `invokefunction` a prefixed
//! registration receives (prefix stripped) and the bus id it is listed by;
//! a registration the hook refuses never becoming visible.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use code_runner_conformance::standin::engine::{
    EngineOptions, FunctionFilter, GuestListener, RbacConfig, StandInEngine,
};
use common::{client, wait_for};
use futures_util::{SinkExt, StreamExt};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::{Error, IIIClient, RegisterFunction};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const AUTH: &str = "probe::auth";
const HOOK: &str = "probe::on-register";

fn rbac() -> RbacConfig {
    RbacConfig {
        auth_function_id: Some(AUTH.into()),
        on_function_registration_function_id: Some(HOOK.into()),
        expose_functions: vec![FunctionFilter::Match("pub::*".into())],
    }
}

fn req(function_id: &str, payload: Value) -> TriggerRequest {
    TriggerRequest {
        function_id: function_id.into(),
        payload,
        action: None,
        timeout_ms: Some(5_000),
    }
}

/// The trusted side: the auth function, the hook, and functions to call.
/// Returns the inputs the auth function saw.
async fn trusted_worker(main_url: &str) -> (IIIClient, Arc<Mutex<Vec<Value>>>) {
    let w = client(main_url, "rbac-trusted").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    w.register_function(
        AUTH,
        RegisterFunction::new_async(move |input: Value| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(input.clone());
                let token = input["query_params"]["token"][0].as_str().unwrap_or("");
                match token {
                    "good" => Ok(json!({
                        "allowed_functions": ["other::granted", "pub::secret"],
                        "forbidden_functions": ["pub::secret", "engine::log::info"],
                    })),
                    "prefixed" => Ok(json!({"function_registration_prefix": "g1"})),
                    _ => Err(Error::Remote {
                        code: "DENIED".into(),
                        message: "unknown token".into(),
                        stacktrace: None,
                    }),
                }
            }
        }),
    );
    w.register_function(
        HOOK,
        RegisterFunction::new_async(|input: Value| async move {
            let id = input["function_id"].as_str().unwrap_or("");
            if id.starts_with("deny::") {
                Err(Error::Remote {
                    code: "DENIED".into(),
                    message: "reserved".into(),
                    stacktrace: None,
                })
            } else {
                Ok(json!({}))
            }
        }),
    );
    for id in ["pub::open", "pub::secret", "other::x", "other::granted"] {
        w.register_function(
            id,
            RegisterFunction::new_async(|_: Value| async move { Ok(json!({"ok": true})) }),
        );
    }
    for id in [AUTH, HOOK, "pub::open", "other::granted"] {
        visible(&w, id, true).await;
    }
    (w, seen)
}

/// Waits until `id` is (or is not) listed by `engine::functions::info`.
async fn visible(c: &IIIClient, id: &str, want: bool) -> bool {
    wait_for(Duration::from_secs(10), || async {
        c.trigger(req("engine::functions::info", json!({"function_id": id})))
            .await
            .is_ok()
            == want
    })
    .await
}

async fn connect(guest_url: &str, token: &str) -> Ws {
    let (ws, _) = tokio_tungstenite::connect_async(format!("{guest_url}/?token={token}"))
        .await
        .expect("the guest listener upgrades");
    ws
}

/// The next text frame, parsed; `None` once the connection closed.
async fn next_json(ws: &mut Ws) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")?;
        match frame {
            Ok(Message::Text(t)) => return Some(serde_json::from_str(&t).expect("JSON frame")),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// Sends one invocation and returns its `invocationresult`, skipping other frames.
async fn invoke(ws: &mut Ws, function_id: &str) -> Value {
    let inv = uuid::Uuid::new_v4().to_string();
    let frame = json!({"type": "invokefunction", "invocation_id": inv, "function_id": function_id, "data": {}});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .expect("send");
    loop {
        let m = next_json(ws).await.expect("connection stays open");
        if m["type"] == "invocationresult" && m["invocation_id"] == inv.as_str() {
            return m;
        }
    }
}

async fn rbac_checks(main_url: &str, guest_url: &str) {
    let (trusted, seen) = trusted_worker(main_url).await;

    // ---- AuthInput ----
    let mut ws = connect(guest_url, "good").await;
    let allowed = invoke(&mut ws, "pub::open").await;
    assert_eq!(allowed["result"], json!({"ok": true}), "{allowed}");
    let input = seen
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("auth was called");
    assert_eq!(input["query_params"], json!({"token": ["good"]}), "{input}");
    assert_eq!(input["ip_address"], "127.0.0.1", "{input}");
    assert!(input["headers"].is_object(), "{input}");
    assert!(
        input["headers"]["sec-websocket-key"].is_string(),
        "the plain upgrade headers: {input}"
    );

    // ---- the decision order and the two messages ----
    let forbidden = invoke(&mut ws, "pub::secret").await;
    assert_eq!(
        forbidden["error"],
        json!({"code": "FORBIDDEN", "message": "function 'pub::secret' not allowed (remove from rbac.forbidden_functions)"}),
        "forbidden beats allowed and exposed: {forbidden}"
    );
    assert_eq!(forbidden["function_id"], "pub::secret");
    assert!(
        forbidden.get("result").is_none_or(Value::is_null),
        "{forbidden}"
    );
    let denied = invoke(&mut ws, "other::x").await;
    assert_eq!(
        denied["error"],
        json!({"code": "FORBIDDEN", "message": "function 'other::x' not allowed (add to rbac.expose_functions)"}),
        "{denied}"
    );
    let granted = invoke(&mut ws, "other::granted").await;
    assert_eq!(granted["result"], json!({"ok": true}), "{granted}");
    let list = invoke(&mut ws, "engine::functions::list").await;
    assert_eq!(
        list["error"]["message"],
        "function 'engine::functions::list' not allowed (add to rbac.expose_functions)",
        "not in the carve-out: {list}"
    );
    let carve = invoke(&mut ws, "engine::workers::register").await;
    assert!(
        carve["error"]["code"] != "FORBIDDEN",
        "the carve-out allows it: {carve}"
    );
    let log = invoke(&mut ws, "engine::log::info").await;
    assert_eq!(
        log["error"]["message"],
        "function 'engine::log::info' not allowed (remove from rbac.forbidden_functions)",
        "forbidden beats the carve-out: {log}"
    );

    // ---- the registration hook ----
    for id in ["deny::x", "pub::mine"] {
        let frame = json!({"type": "registerfunction", "id": id});
        ws.send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }
    assert!(
        visible(&trusted, "pub::mine", true).await,
        "an admitted registration"
    );
    // deny::x was sent first, so its hook answer is in by now.
    let refused = trusted
        .trigger(req(
            "engine::functions::info",
            json!({"function_id": "deny::x"}),
        ))
        .await;
    assert!(
        refused.is_err(),
        "the hook refused deny::x, yet it is listed: {refused:?}"
    );
    drop(ws);

    // ---- a refused connection ----
    let mut bad = connect(guest_url, "forged").await;
    let refused = next_json(&mut bad).await.expect("an error frame");
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["error"]["code"], "AUTH_ERROR", "{refused}");
    assert!(
        next_json(&mut bad).await.is_none(),
        "the connection closes after the error"
    );

    // ---- prefixes ----
    let mut pre = connect(guest_url, "prefixed").await;
    let frame = json!({"type": "registerfunction", "id": "mine"});
    pre.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    assert!(
        visible(&trusted, "g1::mine", true).await,
        "listed as g1::mine"
    );
    let call = tokio::spawn({
        let trusted = trusted.clone();
        async move { trusted.trigger(req("g1::mine", json!({"n": 1}))).await }
    });
    let forwarded = loop {
        let m = next_json(&mut pre).await.expect("the call arrives");
        if m["type"] == "invokefunction" {
            break m;
        }
    };
    assert_eq!(
        forwarded["function_id"], "mine",
        "prefix stripped: {forwarded}"
    );
    let answer = json!({"type": "invocationresult", "invocation_id": forwarded["invocation_id"], "function_id": "mine", "result": {"mine": true}});
    pre.send(Message::Text(answer.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        call.await
            .unwrap()
            .expect("the trusted worker reaches g1::mine"),
        json!({"mine": true})
    );
    let own = invoke(&mut pre, "g1::mine").await;
    assert_eq!(own["error"]["code"], "FORBIDDEN", "not exposed: {own}");
    drop(pre);
    trusted.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_in_rbac_listener() {
    let engine = StandInEngine::start_with(EngineOptions {
        guest: Some(GuestListener {
            host: std::net::Ipv4Addr::LOCALHOST,
            port: 0,
            rbac: rbac(),
        }),
        ..EngineOptions::default()
    })
    .await
    .expect("engine starts");
    let guest = engine.guest_url().expect("a guest listener");
    rbac_checks(&engine.url(), &guest).await;
    engine.shutdown().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_rbac_listener() {
    let Some(bin) = std::env::var_os("III_BIN").filter(|b| !b.is_empty()) else {
        eprintln!(
            "SKIPPED real_engine_rbac_listener: set III_BIN=/path/to/iii (a real engine binary) \
             to run the RBAC listener checks against a real engine as well"
        );
        return;
    };
    let (main, guest) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("scr-rbac-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = format!(
        "workers:\n  - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {main}\n  - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {guest}\n      rbac:\n        auth_function_id: {AUTH}\n        on_function_registration_function_id: {HOOK}\n        expose_functions:\n          - match(\"pub::*\")\n"
    );
    std::fs::write(dir.join("config.yaml"), config).expect("config written");
    let mut child = tokio::process::Command::new(bin)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--no-update-check")
        .current_dir(&dir)
        .env("IIIWORKER_DISABLE_BUILTIN_DAEMONS", "1")
        .kill_on_drop(true)
        .spawn()
        .expect("real engine starts");
    let up = wait_for(Duration::from_secs(30), || async {
        TcpStream::connect(("127.0.0.1", guest)).await.is_ok()
            && TcpStream::connect(("127.0.0.1", main)).await.is_ok()
    })
    .await;
    assert!(up, "the real engine opens both listeners");
    rbac_checks(
        &format!("ws://127.0.0.1:{main}"),
        &format!("ws://127.0.0.1:{guest}"),
    )
    .await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}
