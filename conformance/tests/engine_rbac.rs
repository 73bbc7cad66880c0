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
//!
//! The guest listener also has a middleware and trigger / trigger-type
//! hooks: the middleware's input, its result and error as the caller's, a
//! denied call and the engine's own builtins never reaching it; the trigger
//! hook's input, its rewritten config reaching the type's provider, a throw
//! dropping the binding, a forbidden target answered `FORBIDDEN`,
//! `allowed_trigger_types`, and trigger types refused without
//! `allow_trigger_type_registration` and mapped by their hook with it.

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
const MIDDLEWARE: &str = "probe::middleware";
const TRIGGER_HOOK: &str = "probe::on-trigger";
const TYPE_HOOK: &str = "probe::on-trigger-type";
/// The trigger type a raw provider on the main listener declares.
const PROBE_TYPE: &str = "probe-type";

fn guest_listener() -> GuestListener {
    GuestListener {
        middleware_function_id: Some(MIDDLEWARE.into()),
        rbac: RbacConfig {
            auth_function_id: Some(AUTH.into()),
            on_function_registration_function_id: Some(HOOK.into()),
            on_trigger_registration_function_id: Some(TRIGGER_HOOK.into()),
            on_trigger_type_registration_function_id: Some(TYPE_HOOK.into()),
            expose_functions: vec![FunctionFilter::Match("pub::*".into())],
        },
        ..GuestListener::default()
    }
}

/// What the trusted side's functions were called with, oldest first.
type Log = Arc<Mutex<Vec<Value>>>;

/// The trusted worker and what its auth, middleware and hooks saw.
struct Probe {
    client: IIIClient,
    auth: Log,
    middleware: Log,
    triggers: Log,
    types: Log,
}

fn refusal(code: &str, message: &str) -> Error {
    Error::Remote {
        code: code.into(),
        message: message.into(),
        stacktrace: None,
    }
}

/// The inputs in `log` whose `key` is `value`.
fn seen(log: &Log, key: &str, value: &str) -> Vec<Value> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|v| v[key] == value)
        .cloned()
        .collect()
}

fn req(function_id: &str, payload: Value) -> TriggerRequest {
    TriggerRequest {
        function_id: function_id.into(),
        payload,
        action: None,
        timeout_ms: Some(5_000),
    }
}

/// The trusted side: the auth function, the middleware, the hooks, and
/// functions to call. The middleware answers `pub::wrapped` itself, refuses
/// `pub::boom`, and forwards anything else to its target.
async fn trusted_worker(main_url: &str) -> Probe {
    let w = client(main_url, "rbac-trusted").await;
    let p = Probe {
        client: w.clone(),
        auth: Log::default(),
        middleware: Log::default(),
        triggers: Log::default(),
        types: Log::default(),
    };
    let log = p.auth.clone();
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
                    "tenant" => Ok(json!({
                        "allowed_functions": ["engine::functions::list", "engine::probe"],
                        "allow_trigger_type_registration": true,
                        "context": {"tenant": "t1"},
                    })),
                    "typed" => Ok(json!({"allowed_trigger_types": ["other-type"]})),
                    _ => Err(refusal("DENIED", "unknown token")),
                }
            }
        }),
    );
    w.register_function(
        HOOK,
        RegisterFunction::new_async(|input: Value| async move {
            let id = input["function_id"].as_str().unwrap_or("");
            if id.starts_with("deny::") {
                Err(refusal("DENIED", "reserved"))
            } else {
                Ok(json!({}))
            }
        }),
    );
    let (log, fwd) = (p.middleware.clone(), w.clone());
    w.register_function(
        MIDDLEWARE,
        RegisterFunction::new_async(move |input: Value| {
            let (log, fwd) = (log.clone(), fwd.clone());
            async move {
                log.lock().unwrap().push(input.clone());
                match input["function_id"].as_str().unwrap_or("") {
                    "pub::wrapped" => Ok(json!({"wrapped": input["payload"]})),
                    "pub::boom" => Err(refusal("MW_REFUSED", "the middleware says no")),
                    target => fwd.trigger(req(target, input["payload"].clone())).await,
                }
            }
        }),
    );
    let log = p.triggers.clone();
    w.register_function(
        TRIGGER_HOOK,
        RegisterFunction::new_async(move |input: Value| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(input.clone());
                if input["trigger_id"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("deny-")
                {
                    return Err(refusal("DENIED", "no binding"));
                }
                let mut config = input["config"].clone();
                config["rewritten"] = json!(true);
                Ok(json!({"config": config}))
            }
        }),
    );
    let log = p.types.clone();
    w.register_function(
        TYPE_HOOK,
        RegisterFunction::new_async(move |input: Value| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(input.clone());
                let id = input["trigger_type_id"].as_str().unwrap_or("");
                let description = input["description"].as_str().unwrap_or("");
                Ok(json!({
                    "trigger_type_id": format!("tenant::{id}"),
                    "description": format!("mapped: {description}"),
                }))
            }
        }),
    );
    for id in ["pub::open", "pub::secret", "other::x", "other::granted"] {
        w.register_function(
            id,
            RegisterFunction::new_async(|_: Value| async move { Ok(json!({"ok": true})) }),
        );
    }
    w.register_function(
        "engine::probe",
        RegisterFunction::new_async(|_: Value| async move { Ok(json!({"probe": true})) }),
    );
    for id in [
        AUTH,
        HOOK,
        MIDDLEWARE,
        TRIGGER_HOOK,
        TYPE_HOOK,
        "pub::open",
        "other::granted",
        "engine::probe",
    ] {
        visible(&w, id, true).await;
    }
    p
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

async fn send(ws: &mut Ws, frame: Value) {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .expect("send");
}

/// The next frame of `kind` (and, with `id`, that `invocation_id` or `id`),
/// skipping others.
async fn next_of(ws: &mut Ws, kind: &str, id: Option<&str>) -> Value {
    loop {
        let m = next_json(ws).await.expect("connection stays open");
        let matches_id = |k: &str| id.is_none_or(|id| m[k] == id);
        if m["type"] == kind && (matches_id("invocation_id") || matches_id("id")) {
            return m;
        }
    }
}

/// Sends one invocation and returns its `invocationresult`, skipping other frames.
async fn invoke(ws: &mut Ws, function_id: &str) -> Value {
    invoke_with(ws, function_id, json!({})).await
}

async fn invoke_with(ws: &mut Ws, function_id: &str, data: Value) -> Value {
    let inv = uuid::Uuid::new_v4().to_string();
    let frame = json!({"type": "invokefunction", "invocation_id": inv, "function_id": function_id, "data": data});
    send(ws, frame).await;
    next_of(ws, "invocationresult", Some(&inv)).await
}

/// Names a raw connection, as SDKs do first: the engine holds a nameless
/// connection's registrations back for a grace period.
async fn name(ws: &mut Ws, name: &str) {
    let answer = invoke_with(ws, "engine::workers::register", json!({"name": name})).await;
    assert!(answer.get("error").is_none_or(Value::is_null), "{answer}");
}

/// A trigger type as `engine::triggers::list` shows it.
async fn trigger_type(c: &IIIClient, id: &str) -> Option<Value> {
    let list = c
        .trigger(req("engine::triggers::list", json!({})))
        .await
        .ok()?;
    list["triggers"]
        .as_array()?
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
}

async fn rbac_checks(guest_url: &str, p: &Probe) {
    let (trusted, seen) = (&p.client, &p.auth);

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
        visible(trusted, "pub::mine", true).await,
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
        visible(trusted, "g1::mine", true).await,
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
}

async fn tenancy_checks(main_url: &str, guest_url: &str, p: &Probe) {
    // A trigger type's provider on the main listener, seeing every binding.
    let (mut provider, _) = tokio_tungstenite::connect_async(main_url)
        .await
        .expect("the main listener upgrades");
    name(&mut provider, "rbac-provider").await;
    let declare = json!({"type": "registertriggertype", "id": PROBE_TYPE, "description": "probe"});
    send(&mut provider, declare).await;
    let declared = wait_for(Duration::from_secs(10), || async {
        trigger_type(&p.client, PROBE_TYPE).await.is_some()
    })
    .await;
    assert!(declared, "the provider's trigger type is listed");

    let mut ws = connect(guest_url, "tenant").await;
    name(&mut ws, "rbac-tenant").await;

    // ---- the middleware's input, and its result as the caller's ----
    let wrapped = invoke_with(&mut ws, "pub::wrapped", json!({"n": 1})).await;
    assert_eq!(wrapped["result"], json!({"wrapped": {"n": 1}}), "{wrapped}");
    assert_eq!(wrapped["function_id"], "pub::wrapped", "{wrapped}");
    let input = seen(&p.middleware, "function_id", "pub::wrapped");
    assert_eq!(
        input,
        vec![json!({
            "function_id": "pub::wrapped",
            "payload": {"n": 1},
            "action": null,
            "context": {"tenant": "t1"},
            "namespace": "default",
        })],
        "exactly this input, no _caller_worker_id"
    );

    // ---- its error, unchanged; a forwarded call's result ----
    let boom = invoke(&mut ws, "pub::boom").await;
    assert_eq!(
        boom["error"],
        json!({"code": "MW_REFUSED", "message": "the middleware says no"}),
        "{boom}"
    );
    assert!(boom.get("result").is_none_or(Value::is_null), "{boom}");
    let open = invoke(&mut ws, "pub::open").await;
    assert_eq!(open["result"], json!({"ok": true}), "{open}");

    // ---- what never reaches it: denied calls, the engine's own builtins ----
    let denied = invoke(&mut ws, "other::x").await;
    assert_eq!(denied["error"]["code"], "FORBIDDEN", "{denied}");
    let list = invoke(&mut ws, "engine::functions::list").await;
    assert!(list["result"]["functions"].is_array(), "{list}");
    let probe = invoke(&mut ws, "engine::probe").await;
    assert_eq!(probe["result"], json!({"probe": true}), "{probe}");
    for (id, reached) in [
        ("other::x", false),
        ("engine::functions::list", false),
        ("engine::workers::register", false),
        ("engine::probe", true),
    ] {
        let n = seen(&p.middleware, "function_id", id).len();
        assert_eq!(n, usize::from(reached), "middleware calls for {id}");
    }

    // ---- a void call: the middleware sees its action, and is answered ----
    let void = json!({"type": "invokefunction", "function_id": "pub::wrapped", "data": {"v": 2}, "action": {"type": "void"}});
    send(&mut ws, void).await;
    let answer = loop {
        let m = next_of(&mut ws, "invocationresult", None).await;
        if m["function_id"] == "pub::wrapped" {
            break m;
        }
    };
    assert_eq!(answer["result"], json!({"wrapped": {"v": 2}}), "{answer}");
    assert!(answer["invocation_id"].is_string(), "a fresh id: {answer}");
    let input = seen(&p.middleware, "function_id", "pub::wrapped");
    assert_eq!(input[1]["action"], json!({"type": "void"}), "{input:?}");

    // ---- the trigger hook: a throw drops, a rewritten config is bound ----
    for (id, function_id) in [("deny-1", "pub::open"), ("t-1", "pub::open")] {
        let frame = json!({"type": "registertrigger", "id": id, "trigger_type": PROBE_TYPE, "function_id": function_id, "config": {"a": 1}, "metadata": {"m": 1}});
        send(&mut ws, frame).await;
    }
    let bound = next_of(&mut provider, "registertrigger", None).await;
    assert_eq!(
        bound["id"], "t-1",
        "deny-1 never reaches the provider: {bound}"
    );
    assert_eq!(bound["function_id"], "pub::open", "{bound}");
    assert_eq!(
        bound["config"],
        json!({"a": 1, "rewritten": true}),
        "{bound}"
    );
    assert_eq!(seen(&p.triggers, "trigger_id", "deny-1").len(), 1);
    assert_eq!(
        seen(&p.triggers, "trigger_id", "t-1"),
        vec![json!({
            "trigger_id": "t-1",
            "trigger_type": PROBE_TYPE,
            "function_id": "pub::open",
            "config": {"a": 1},
            "metadata": {"m": 1},
            "namespace": "default",
            "context": {"tenant": "t1"},
        })]
    );

    // ---- a target the session may not call ----
    let frame = json!({"type": "registertrigger", "id": "t-2", "trigger_type": PROBE_TYPE, "function_id": "other::x", "config": {}});
    send(&mut ws, frame).await;
    let refused = next_of(&mut ws, "triggerregistrationresult", Some("t-2")).await;
    assert_eq!(
        refused,
        json!({"type": "triggerregistrationresult", "id": "t-2", "trigger_type": PROBE_TYPE,
               "function_id": "other::x", "error": {"code": "FORBIDDEN",
               "message": "function 'other::x' not allowed in namespace 'default'"}})
    );

    // ---- allowed_trigger_types: another type is dropped before the hook ----
    let mut typed = connect(guest_url, "typed").await;
    name(&mut typed, "rbac-typed").await;
    let frame = json!({"type": "registertrigger", "id": "typed-1", "trigger_type": PROBE_TYPE, "function_id": "pub::open", "config": {}});
    send(&mut typed, frame).await;
    // The frame before it on this connection was handled once this answers.
    invoke(&mut typed, "pub::open").await;
    assert!(seen(&p.triggers, "trigger_id", "typed-1").is_empty());

    // ---- trigger types: refused without allow_trigger_type_registration ----
    let mut plain = connect(guest_url, "good").await;
    name(&mut plain, "rbac-plain").await;
    let frame = json!({"type": "registertriggertype", "id": "guest-denied", "description": "x"});
    send(&mut plain, frame).await;
    invoke(&mut plain, "pub::open").await;
    assert!(seen(&p.types, "trigger_type_id", "guest-denied").is_empty());
    assert_eq!(trigger_type(&p.client, "guest-denied").await, None);
    assert_eq!(trigger_type(&p.client, "tenant::guest-denied").await, None);

    // ---- and mapped by their hook with it ----
    let frame = json!({"type": "registertriggertype", "id": "guest-type", "description": "mine"});
    send(&mut ws, frame).await;
    let listed = wait_for(Duration::from_secs(10), || async {
        trigger_type(&p.client, "tenant::guest-type")
            .await
            .is_some_and(|t| t["description"] == "mapped: mine")
    })
    .await;
    assert!(listed, "the mapped trigger type is listed");
    assert_eq!(
        seen(&p.types, "trigger_type_id", "guest-type"),
        vec![
            json!({"trigger_type_id": "guest-type", "description": "mine", "context": {"tenant": "t1"}})
        ]
    );
    assert_eq!(trigger_type(&p.client, "guest-type").await, None);
}

async fn stand_in() -> StandInEngine {
    StandInEngine::start_with(EngineOptions {
        guest: Some(guest_listener()),
        ..EngineOptions::default()
    })
    .await
    .expect("engine starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_in_rbac_listener() {
    let engine = stand_in().await;
    let guest = engine.guest_url().expect("a guest listener");
    let probe = trusted_worker(&engine.url()).await;
    rbac_checks(&guest, &probe).await;
    probe.client.shutdown_async().await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_in_middleware_and_trigger_hooks() {
    let engine = stand_in().await;
    let guest = engine.guest_url().expect("a guest listener");
    let probe = trusted_worker(&engine.url()).await;
    tenancy_checks(&engine.url(), &guest, &probe).await;
    probe.client.shutdown_async().await;
    engine.shutdown().await;
}

/// The real engine's config: the stand-in's two listeners, in its YAML.
fn real_config(main: u16, guest: u16) -> String {
    format!(
        "workers:\n  - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {main}\n\
         \x20 - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {guest}\n\
         \x20     middleware_function_id: {MIDDLEWARE}\n      rbac:\n        auth_function_id: {AUTH}\n\
         \x20       on_function_registration_function_id: {HOOK}\n\
         \x20       on_trigger_registration_function_id: {TRIGGER_HOOK}\n\
         \x20       on_trigger_type_registration_function_id: {TYPE_HOOK}\n\
         \x20       expose_functions:\n          - match(\"pub::*\")\n"
    )
}

#[test]
fn the_real_config_matches_the_stand_in_listener() {
    let v: Value = serde_yaml::from_str(&real_config(1, 2)).expect("YAML");
    let g = guest_listener();
    let guest = &v["workers"][1]["config"];
    assert_eq!(
        guest["middleware_function_id"],
        json!(g.middleware_function_id)
    );
    let rbac = &guest["rbac"];
    assert_eq!(rbac["auth_function_id"], json!(g.rbac.auth_function_id));
    assert_eq!(
        rbac["on_trigger_registration_function_id"],
        json!(g.rbac.on_trigger_registration_function_id)
    );
    assert_eq!(
        rbac["on_trigger_type_registration_function_id"],
        json!(g.rbac.on_trigger_type_registration_function_id)
    );
    assert_eq!(rbac["expose_functions"], json!(["match(\"pub::*\")"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_rbac_listener() {
    let Some(engine) = common::real_engine::RealEngine::start(
        "real_engine_rbac_listener",
        "the RBAC listener, middleware and hook checks",
        real_config,
    )
    .await
    else {
        return;
    };
    let (main_url, guest_url) = (engine.main_url(), engine.guest_url());
    let probe = trusted_worker(&main_url).await;
    rbac_checks(&guest_url, &probe).await;
    tenancy_checks(&main_url, &guest_url, &probe).await;
    probe.client.shutdown_async().await;
    engine.stop().await;
}
