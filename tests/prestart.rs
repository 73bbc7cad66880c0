//! The manager's side of pre-started interpreters, over the in-memory
//! daemon: which exec each call becomes (cold and starting the next
//! interpreter, or relayed into the waiting one while the next starts),
//! what a relay's verdict turns into, and that nothing waits in a VM that
//! stopped. The guest scripts themselves run for real in `tests/e2e.rs`
//! and the conformance suite.

mod fakes;

use std::sync::{Arc, Mutex};

use fakes::{ok_out, FakeBus, FakeSandbox};
use sandbox_code_runner::config::Config;
use sandbox_code_runner::error::ErrorCode;
use sandbox_code_runner::functions;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::sandbox::{ExecOutput, ExecParams};
use sandbox_code_runner::tenancy::Caller;
use serde_json::{json, Value};

const DOUBLE: &str = "def handler(payload):\n    return {'doubled': payload['n'] * 2}\n";

fn manager(prestart: bool) -> (Arc<FakeSandbox>, Arc<FakeBus>, Arc<Manager>) {
    let sandbox = FakeSandbox::new();
    let bus = Arc::new(FakeBus::default());
    // Node's pre-started processes (scope servers are
    // `prestart::scope_tests`').
    let config = Config {
        warm_pool: 0,
        prestart,
        node_scopes: false,
        ..Config::default()
    };
    let m = Manager::new(
        sandbox.clone(),
        bus.clone(),
        config,
        VmNaming::new("test-owner"),
        "ws://127.0.0.1:49134".into(),
    );
    (sandbox, bus, m)
}

/// What one exec was, as the tests tell them apart.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// The wrapper exec as it always was, after starting generation `spawn`.
    ColdSpawning { spawn: u64 },
    /// Relayed into generation `using`, starting `spawn`.
    Relay { using: u64, spawn: Option<u64> },
    /// The wrapper exec alone.
    Cold,
}

fn generation_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn seen(p: &ExecParams) -> Seen {
    if p.argv[0] != "sh" {
        return Seen::Cold;
    }
    let command = p.argv[2].lines().last().unwrap_or_default();
    let spawn = generation_after(command, "scr_spawn /tmp/.scr/pre/")
        .or_else(|| generation_after(command, "scr_fill /tmp/.scr/pre/"));
    let relay = generation_after(command, "scr_relay /tmp/.scr/pre/")
        .or_else(|| generation_after(command, "scr_relay_fork /tmp/.scr/pre/"));
    match relay {
        Some(using) => Seen::Relay { using, spawn },
        None => Seen::ColdSpawning {
            spawn: spawn.expect("a spawn"),
        },
    }
}

/// The request a relay hands over: its header and the wrapper's stdin.
fn relayed(p: &ExecParams) -> (Value, Value) {
    let stdin = p.stdin.as_deref().expect("a request");
    let nl = stdin.iter().position(|b| *b == b'\n').expect("a header");
    let header: Value = serde_json::from_slice(&stdin[..nl]).unwrap();
    let inner: Value = serde_json::from_slice(&stdin[nl + 1..]).unwrap_or(Value::Null);
    (header, inner)
}

fn frame(secret: &str, value: &Value) -> String {
    format!("\u{1e}SCR1 {secret} ok {value}\n")
}

/// Answers every exec: relays with `relay(p)`, the rest with a genuine frame
/// (or "4\n" for runs); records what each exec was.
fn answering(
    sandbox: &FakeSandbox,
    relay: impl Fn(&ExecParams) -> ExecOutput + Send + Sync + 'static,
) -> Arc<Mutex<Vec<Seen>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    sandbox.on_exec(move |p| {
        let s = seen(p);
        log2.lock().unwrap().push(s.clone());
        Ok(match s {
            Seen::Relay { .. } => relay(p),
            _ => match serde_json::from_slice::<Value>(p.stdin.as_deref().unwrap_or_default()) {
                Ok(req) if req.get("secret").is_some() => ok_out(
                    &frame(req["secret"].as_str().unwrap(), &json!({"doubled": 42})),
                    0,
                ),
                _ => ok_out("4\n", 0),
            },
        })
    });
    log
}

/// The verdict line a relay exec's shell prints: with the key the worker
/// put in that exec's env (a line without it is the call's own output).
fn told(p: &ExecParams, words: &str) -> String {
    let key = p
        .env
        .get("SCR_VERDICT_KEY")
        .expect("a relay carries its verdict's key");
    format!("\u{1e}SCR-RELAY {key} {words}\n")
}

/// A relay whose interpreter answered `value`, having printed `hello`.
fn relay_answering(value: Value) -> impl Fn(&ExecParams) -> ExecOutput {
    move |p| {
        let (_, inner) = relayed(p);
        ExecOutput {
            stdout: frame(inner["secret"].as_str().unwrap(), &value),
            stderr: format!("hello\n{}", told(p, "exit 0")),
            exit_code: Some(0),
            duration_ms: 2,
        }
    }
}

async fn register(m: &Arc<Manager>, id: &str) {
    functions::register::handle(
        m,
        &Caller::Trusted,
        json!({"function_id": id, "lang": "python", "source": DOUBLE}),
    )
    .await
    .expect("registered");
}

#[tokio::test]
async fn python_calls_are_forked_off_the_server_the_registration_started() {
    let (sandbox, bus, m) = manager(true);
    let log = answering(&sandbox, relay_answering(json!({"doubled": 8})));
    register(&m, "a::f").await;
    for n in [4, 5] {
        let v = bus.call_published("a::f", json!({ "n": n })).await.unwrap();
        assert_eq!(v, json!({"doubled": 8}));
    }
    let log = log.lock().unwrap().clone();
    let Seen::ColdSpawning { spawn: server } = log[0] else {
        panic!("the registration check runs cold and starts the server: {log:?}")
    };
    let relayed = Seen::Relay {
        using: server,
        spawn: None,
    };
    assert_eq!(
        log[1..],
        [relayed.clone(), relayed],
        "the server serves every call"
    );
    assert_eq!(m.interpreters_waiting(), 1);
}

#[tokio::test]
async fn a_server_started_before_the_sdk_landed_is_replaced_after_one_call() {
    let (sandbox, bus, m) = manager(true);
    let log = answering(&sandbox, relay_answering(json!(1)));
    register(&m, "a::f").await;
    // A second function that names `iii`: the SDK lands after the server.
    functions::register::handle(
        &m,
        &Caller::Trusted,
        json!({"function_id": "a::g", "lang": "python",
               "source": "def handler(payload):\n    return iii is not None\n"}),
    )
    .await
    .expect("registered");
    bus.call_published("a::f", json!({})).await.unwrap();
    bus.call_published("a::f", json!({})).await.unwrap();
    let log = log.lock().unwrap().clone();
    let relays: Vec<Seen> = log
        .iter()
        .filter(|s| matches!(s, Seen::Relay { .. }))
        .cloned()
        .collect();
    let Seen::Relay {
        using: server,
        spawn: Some(fresh),
    } = relays[0]
    else {
        panic!("the check of a::g replaces the server: {log:?}")
    };
    assert_ne!(server, fresh);
    let after = Seen::Relay {
        using: fresh,
        spawn: None,
    };
    assert_eq!(relays[1..], [after.clone(), after], "{log:?}");
}

#[tokio::test]
async fn each_node_call_starts_the_interpreter_for_the_next() {
    let (sandbox, bus, m) = manager(true);
    let log = answering(&sandbox, relay_answering(json!(2)));
    functions::register::handle(
        &m,
        &Caller::Trusted,
        json!({"function_id": "n::f", "lang": "node",
               "source": "export function handler(p) { return 2; }\n"}),
    )
    .await
    .expect("registered");
    for _ in 0..2 {
        assert_eq!(
            bus.call_published("n::f", json!({})).await.unwrap(),
            json!(2)
        );
    }
    let log = log.lock().unwrap().clone();
    let Seen::ColdSpawning { spawn: first } = log[0] else {
        panic!("{log:?}")
    };
    let Seen::Relay {
        using,
        spawn: Some(second),
    } = log[1]
    else {
        panic!("{log:?}")
    };
    assert_eq!(using, first);
    assert_eq!(
        log[2],
        Seen::Relay {
            using: second,
            spawn: Some(second + 1)
        }
    );
}

#[tokio::test]
async fn the_relayed_request_carries_the_calls_env_and_the_relay_none() {
    let (sandbox, bus, m) = manager(true);
    let requests = Arc::new(Mutex::new(Vec::new()));
    let r2 = requests.clone();
    let inner = relay_answering(json!(1));
    answering(&sandbox, move |p| {
        r2.lock().unwrap().push((p.env.clone(), relayed(p)));
        inner(p)
    });
    register(&m, "a::f").await;
    bus.call_published("a::f", json!({"n": 1, "_caller_worker_id": "w"}))
        .await
        .unwrap();
    let (relay_env, (header, inner)) = requests.lock().unwrap()[0].clone();
    assert_eq!(
        relay_env.keys().collect::<Vec<_>>(),
        ["SCR_VERDICT_KEY"],
        "the relay carries no env of the call's: {relay_env:?}"
    );
    assert_eq!(header["env"]["SCR_WORKER_NAME"], "sandbox-code-runner:a::f");
    assert!(header["script"].as_str().unwrap().contains("def _main"));
    assert_eq!(
        inner["payload"],
        json!({"n": 1}),
        "the payload as the cold path gets it"
    );
    assert_eq!(inner["mode"], "call");
}

#[tokio::test]
async fn a_relay_that_found_no_server_runs_the_call_cold_once() {
    let (sandbox, bus, m) = manager(true);
    let log = answering(&sandbox, |p| ExecOutput {
        stderr: told(p, "cold"),
        exit_code: Some(0),
        ..ExecOutput::default()
    });
    register(&m, "a::f").await;
    let v = bus.call_published("a::f", json!({"n": 1})).await.unwrap();
    assert_eq!(v, json!({"doubled": 42}), "the cold exec answered");
    let log = log.lock().unwrap().clone();
    assert!(matches!(log[1], Seen::Relay { .. }), "{log:?}");
    assert!(
        matches!(log[2], Seen::ColdSpawning { .. }),
        "the call itself, starting a new server: {log:?}"
    );
    assert_eq!(log.len(), 3, "{log:?}");
}

#[tokio::test]
async fn a_relay_past_its_deadline_is_the_daemons_timeout() {
    let (sandbox, bus, m) = manager(true);
    answering(&sandbox, |p| ExecOutput {
        stderr: format!("partial\n{}", told(p, "timeout")),
        exit_code: Some(124),
        ..ExecOutput::default()
    });
    register(&m, "a::f").await;
    let e = bus
        .call_published("a::f", json!({"n": 1}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Timeout, "{e:?}");
}

#[tokio::test]
async fn a_run_that_exits_like_a_relay_verdict_code_is_not_run_twice() {
    let (sandbox, _bus, m) = manager(true);
    let log = answering(&sandbox, |p| ExecOutput {
        stdout: "ran\n".into(),
        stderr: told(p, "exit 97"),
        exit_code: Some(97),
        duration_ms: 1,
    });
    let kept = functions::run::handle(
        &m,
        &Caller::Trusted,
        json!({"lang": "python", "code": "print(1)", "keep": true}),
    )
    .await
    .unwrap();
    let id = kept.runtime_id.clone().unwrap();
    let out = functions::run::handle(
        &m,
        &Caller::Trusted,
        json!({"runtime_id": id, "code": "import sys; sys.exit(97)"}),
    )
    .await
    .unwrap();
    assert_eq!(
        (out.exit_code, out.stdout.as_str(), out.stderr.as_str()),
        (97, "ran\n", "")
    );
    assert_eq!(
        log.lock().unwrap().len(),
        2,
        "one kept run, one relayed run"
    );
}

#[tokio::test]
async fn one_shot_runs_start_nothing_and_stopped_vms_keep_nothing_waiting() {
    let (sandbox, bus, m) = manager(true);
    let log = answering(&sandbox, relay_answering(json!(1)));
    functions::run::handle(
        &m,
        &Caller::Trusted,
        json!({"lang": "python", "code": "print(1)"}),
    )
    .await
    .unwrap();
    assert_eq!(log.lock().unwrap().clone(), vec![Seen::Cold]);
    register(&m, "a::f").await;
    assert_eq!(m.interpreters_waiting(), 1);
    functions::teardown::handle(
        &m,
        &Caller::Trusted,
        json!({"namespace": "a", "lang": "python"}),
    )
    .await
    .unwrap();
    assert_eq!(m.interpreters_waiting(), 0);
    drop(bus);
}

#[tokio::test]
async fn without_prestart_every_call_is_the_wrapper_exec() {
    let (sandbox, bus, m) = manager(false);
    let log = answering(&sandbox, relay_answering(json!(1)));
    register(&m, "a::f").await;
    bus.call_published("a::f", json!({"n": 1})).await.unwrap();
    assert_eq!(log.lock().unwrap().clone(), vec![Seen::Cold, Seen::Cold]);
    assert_eq!(m.interpreters_waiting(), 0);
}
