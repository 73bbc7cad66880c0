//! End-to-end checks of the worker binary over the hermetic stack that a
//! golden case cannot express: a crash and the next boot's orphan sweep,
//! fuzzed payloads, the warm pool dying with the worker, the console assets,
//! and a scan of exported telemetry. Everything a caller can observe through
//! requests and responses lives in `golden/cases/` and runs through the suite.

mod common;

use std::time::Duration;

use code_runner_conformance::standin::host::pids_with;
use common::{wait_for, Harness};
use serde_json::{json, Value};

const RUN: &str = "sandbox-code-runner::run";
const REGISTER: &str = "sandbox-code-runner::register_function";
const TEARDOWN: &str = "sandbox-code-runner::teardown";

fn code(e: &common::CallError) -> &str {
    e.code.as_str()
}

const DOUBLE: &str = "def handler(payload):\n    return {\"doubled\": payload[\"n\"] * 2}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_forgets_ids_and_sweeps_orphans() {
    let mut h = Harness::start("vm_owner: e2e-restart\n").await;
    let id = h.kept().await;
    h.call(
        REGISTER,
        json!({"function_id": "rs-app::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    assert_eq!(h.live_sandboxes(), 2);
    h.crash_worker().await;
    assert_eq!(h.live_sandboxes(), 2, "a crash leaves its VMs behind");
    h.spawn_worker().await;
    let swept = wait_for(Duration::from_secs(20), || async {
        h.live_sandboxes() == 0
    })
    .await;
    assert!(swept, "the next boot stops the orphans of its predecessor");
    let e = h
        .run(json!({"runtime_id": id, "code": "1"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::runtime_not_found");
    let e = h
        .call(TEARDOWN, json!({"namespace": "rs-app"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::runtime_not_found");
    h.finish(0).await;
}

fn malformed_payloads() -> Vec<(&'static str, Value)> {
    let mut v: Vec<(&'static str, Value)> = Vec::new();
    let junk = [
        json!(null),
        json!(1),
        json!(-1.5),
        json!("str"),
        json!(true),
        json!([]),
        json!([1, 2]),
        json!({}),
        json!({"a": {"b": [null, {"c": []}]}}),
        json!("\u{0000}\u{ffff}"),
        json!(0),
        json!(u64::MAX),
        json!(-0.0),
        json!(1e-300),
        json!(false),
        json!("🦀 ünïcödé"),
        json!("x".repeat(10_000)),
        json!({"$ref": "#"}),
        json!([[[[[]]]]]),
        json!({"code": "print(1)", "lang": "python"}),
    ];
    // Only values of the wrong type for the field: a right-typed value is
    // not malformed.
    let is_str = |j: &Value| j.is_string();
    let is_uint = |j: &Value| j.is_u64();
    for j in &junk {
        if !is_str(j) {
            v.push((RUN, json!({"lang": "python", "code": j})));
            v.push((
                REGISTER,
                json!({"function_id": "ok::f", "lang": "python", "source": j}),
            ));
        }
        v.push((RUN, json!({"lang": j, "code": "print(1)"})));
        v.push((
            REGISTER,
            json!({"function_id": j, "lang": "python", "source": DOUBLE}),
        ));
        v.push((
            REGISTER,
            json!({"function_id": "ok::f", "lang": j, "source": DOUBLE}),
        ));
        if !j.is_boolean() {
            v.push((RUN, json!({"lang": "node", "code": "1", "keep": j})));
        }
        if !j.is_null() && !is_uint(j) {
            v.push((RUN, json!({"lang": "node", "code": "1", "timeout_ms": j})));
        }
        if !j.is_null() && !is_str(j) {
            v.push((RUN, json!({"lang": "node", "code": "1", "runtime_id": j})));
            v.push((TEARDOWN, json!({"runtime_id": j})));
            v.push((TEARDOWN, json!({"namespace": j})));
            v.push((REGISTER, json!({"function_id": "ok::f", "lang": "python", "source": DOUBLE, "description": j})));
        }
    }
    for (f, p) in [
        (RUN, json!({"code": "print(1)"})),
        (RUN, json!({"lang": "python"})),
        (RUN, json!({"lang": "python", "code": ""})),
        (
            RUN,
            json!({"lang": "python", "code": "x".repeat((1 << 20) + 1)}),
        ),
        (RUN, json!({"lang": "ruby", "code": "puts 1"})),
        (RUN, json!({"lang": "Python", "code": "print(1)"})),
        (
            RUN,
            json!({"lang": "python", "code": "print(1)", "timeout_ms": -5}),
        ),
        (
            RUN,
            json!({"lang": "python", "code": "print(1)", "timeout_ms": 1e30}),
        ),
        (REGISTER, json!({"lang": "python", "source": DOUBLE})),
        (REGISTER, json!({"function_id": "a::f", "source": DOUBLE})),
        (REGISTER, json!({"function_id": "a::f", "lang": "python"})),
        (
            REGISTER,
            json!({"function_id": "a::f", "lang": "python", "source": ""}),
        ),
        (
            REGISTER,
            json!({"function_id": "a::f", "lang": "python", "source": "x".repeat((1 << 20) + 1)}),
        ),
        (
            REGISTER,
            json!({"function_id": "a::f", "lang": "python", "source": DOUBLE, "description": "d".repeat(4097)}),
        ),
        (TEARDOWN, json!({})),
        (TEARDOWN, json!({"runtime_id": "rt-1", "namespace": "a"})),
        (TEARDOWN, json!({"runtime_id": null, "namespace": null})),
    ] {
        v.push((f, p));
    }
    let bad_ids = [
        "nosep",
        "::f",
        "a::",
        "A::f",
        "a b::f",
        "é::f",
        ".a::f",
        "a..b::f",
        "sandbox-code-runner::x",
        "sandbox-code-runner::run",
        "ns/x::f",
        "ns\u{0}::f",
        "🦀::f",
        "a:f",
    ];
    for id in bad_ids {
        v.push((
            REGISTER,
            json!({"function_id": id, "lang": "python", "source": DOUBLE}),
        ));
    }
    let long_ns = format!("{}::f", "a".repeat(65));
    let long_name = format!("a::{}", "f".repeat(257));
    v.push((
        REGISTER,
        json!({"function_id": long_ns, "lang": "python", "source": DOUBLE}),
    ));
    v.push((
        REGISTER,
        json!({"function_id": long_name, "lang": "python", "source": DOUBLE}),
    ));
    // Seeded random nested junk, never a string: as `code` it is malformed.
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0x5c12);
    for _ in 0..40 {
        let j = random_junk(&mut rng, 4);
        v.push((RUN, json!({"lang": "python", "code": j})));
    }
    for ns in [
        "",
        "::",
        "A",
        "a b",
        ".x",
        "x..y",
        "sandbox-code-runner",
        "é",
        &"n".repeat(65),
    ] {
        v.push((TEARDOWN, json!({"namespace": ns})));
    }
    v
}

/// A random non-string JSON value, nested up to `depth`.
fn random_junk(rng: &mut impl rand::Rng, depth: u32) -> Value {
    match rng.gen_range(0..if depth == 0 { 4 } else { 6 }) {
        0 => Value::Null,
        1 => json!(rng.gen::<i64>()),
        2 => json!(rng.gen::<f64>() * 1e6),
        3 => json!(rng.gen::<bool>()),
        4 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| random_junk(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let mut m = serde_json::Map::new();
            for i in 0..rng.gen_range(0..4) {
                let key: String = (0..rng.gen_range(1..6))
                    .map(|_| rng.gen_range('a'..='ü'))
                    .collect();
                m.insert(format!("{key}{i}"), random_junk(rng, depth - 1));
            }
            Value::Object(m)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_invalid_and_harmless() {
    let h = Harness::start("").await;
    let cases = malformed_payloads();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    for (i, (f, payload)) in cases.iter().enumerate() {
        let r = h.call_with(f, payload.clone(), 30_000).await;
        let e = r.expect_err(&format!("case {i} ({f} {payload}) must fail"));
        assert_eq!(
            e.code,
            "sandbox-code-runner::invalid_request",
            "case {i}: {f} {} → {} {}",
            payload.to_string().chars().take(200).collect::<String>(),
            e.code,
            e.message
        );
    }
    // Still serving, and nothing leaked.
    let out = h
        .run(json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
    h.finish(0).await;
}

/// A one-shot run answers once its VM is gone, not once the daemon has slept
/// its stop grace: by the answer, a process the run left behind is dead
/// (the VM ended), while the daemon's entry still waits out a 3 s grace.
#[rstest::rstest]
#[case::python(
    "python",
    "import subprocess\nsubprocess.Popen(['sleep', '{m}'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)\nprint('left')"
)]
#[case::node(
    "node",
    "import { spawn } from 'node:child_process';\nspawn('sleep', ['{m}'], { detached: true, stdio: 'ignore' }).unref();\nconsole.log('left');"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_answers_with_its_vm_gone_before_the_stop_grace_ends(
    #[case] lang: &str,
    #[case] code: &str,
) {
    let limits = code_runner_conformance::standin::sandbox_double::SandboxLimits {
        stop_grace_ms: 3_000,
        ..common::test_limits()
    };
    let h = Harness::start_with("warm_pool: 0\n", limits).await;
    let marker = format!("3{}.{}", std::process::id(), lang.len());
    let out = h
        .run(json!({"lang": lang, "code": code.replace("{m}", &marker)}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "left\n");
    assert!(
        pids_with(&format!("sleep {marker}")).is_empty(),
        "what the run left behind died with its VM before the answer"
    );
    assert_eq!(
        h.live_sandboxes(),
        1,
        "the answer came while the daemon still slept its stop grace"
    );
    let stopped = wait_for(Duration::from_secs(30), || async {
        h.live_sandboxes() == 0
    })
    .await;
    assert!(stopped, "the stop finished after the answer");
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_pool_serves_runs_and_dies_with_the_worker() {
    let h = Harness::start("warm_pool: 1\noneshot_stop: background\n").await;
    let filled = wait_for(Duration::from_secs(20), || async {
        let s = h.call("sandbox-code-runner::stats", json!({})).await;
        s.is_ok_and(|s| s["pool_ready"] == json!({"node": 1, "python": 1}))
    })
    .await;
    assert!(filled, "one warm VM per language");
    for lang_code in [("python", "print(2+2)"), ("node", "console.log(2+2)")] {
        let out = h
            .run(json!({"lang": lang_code.0, "code": lang_code.1}))
            .await
            .unwrap();
        assert_eq!(out["stdout"], "4\n");
        assert!(out.get("runtime_id").is_none());
    }
    // The refill starts after the taker's first exec, so the used VMs can
    // be gone before a refill's create lands: settled means both refills are
    // ready and nothing else is left.
    let settled = wait_for(Duration::from_secs(20), || async {
        let s = h.call("sandbox-code-runner::stats", json!({})).await;
        s.is_ok_and(|s| s["pool_ready"] == json!({"node": 1, "python": 1}))
            && h.live_sandboxes() == 2
    })
    .await;
    assert!(settled, "used VMs are stopped, the pool refilled");
    let stats = h
        .call("sandbox-code-runner::stats", json!({}))
        .await
        .unwrap();
    assert_eq!(stats["run"]["ops"], 2);
    assert_eq!(
        stats["run"]["sandbox_calls"], 4,
        "a pooled one-shot costs exec + stop"
    );
    let added = stats["run"]["worker_added_us_mean"].as_f64().unwrap();
    assert!(
        (0.0..20_000.0).contains(&added),
        "worker-added latency is accounted: {added} µs"
    );
    h.finish(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_assets_are_served_and_bound() {
    let h = Harness::start("").await;
    for (path, content_type, mark) in [
        // The cards register through the console's function-trigger registrar.
        ("cards.js", "text/javascript", "functionTriggers"),
        ("cards.css", "text/css", ""),
    ] {
        let asset = h
            .call(
                "sandbox-code-runner::ui-content",
                json!({"path": format!("sandbox-code-runner/{path}")}),
            )
            .await
            .unwrap();
        let served = asset["content_type"].as_str().unwrap();
        assert!(served.starts_with(content_type), "{path}: {served}");
        assert!(asset["content"].as_str().unwrap().contains(mark), "{path}");
    }
    let e = h
        .call(
            "sandbox-code-runner::ui-content",
            json!({"path": "../etc/passwd"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::invalid_request");
    let console =
        common::TriggerProvider::start(&h.bench.url(), &["console:script", "console:style"]).await;
    let bound = wait_for(Duration::from_secs(10), || async {
        let mut scripts = console.bindings("console:script", "sandbox-code-runner::ui-content");
        scripts.sort_by_key(|v| v.to_string());
        scripts
            == vec![
                json!({"path": "sandbox-code-runner/cards.js"}),
                json!({"path": "sandbox-code-runner/page.js"}),
            ]
            && console.bindings("console:style", "sandbox-code-runner::ui-content")
                == vec![json!({"path": "sandbox-code-runner/cards.css"})]
    })
    .await;
    assert!(
        bound,
        "console:script and console:style are bound to ui-content"
    );
    console.shutdown().await;
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_runtime_id_reaches_telemetry() {
    let h = Harness::start("").await;
    let id = h.kept().await;
    h.run(json!({"runtime_id": id, "code": "print(2)"}))
        .await
        .unwrap();
    h.call(TEARDOWN, json!({"runtime_id": id})).await.unwrap();
    let engine = h.bench.engine().unwrap();
    // The worker's spans for these calls reach the engine's /otel socket.
    let exported = wait_for(Duration::from_secs(30), || async {
        engine
            .telemetry()
            .iter()
            .any(|f| f.contains("sandbox-code-runner::teardown"))
    })
    .await;
    assert!(exported, "the worker exports spans for its calls");
    let worker_frames: Vec<String> = engine
        .telemetry()
        .into_iter()
        .filter(|f| f.contains("sandbox-code-runner"))
        .collect();
    for f in &worker_frames {
        common::assert_no_runtime_ids(f);
    }
    h.finish(0).await;
}

/// What the daemon's SDK could record on its spans stays small while the
/// guest SDK travels: the python archive is read out of the first VM and
/// planted into the next ones, and the node bundle planted, through data
/// channels, never as a call payload or an exec's output. (Inline, each
/// python VM cost ~8.6 MB of `sandbox::fs::write` payloads.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_sdks_travel_through_data_channels_not_payloads() {
    let h = Harness::start("warm_pool: 0\n").await;
    let since = std::time::Instant::now();
    let py = "print(type(iii.trigger({'function_id': 'engine::functions::list', 'payload': {}})).__name__)";
    for _ in 0..3 {
        let out = h
            .run(json!({"lang": "python", "code": py, "timeout_ms": 30000}))
            .await
            .unwrap();
        assert_eq!(out["stdout"], "dict\n", "{out}");
    }
    let node = "const r = await iii.trigger({ function_id: 'engine::functions::list', payload: {} }); console.log(typeof r);";
    let out = h
        .run(json!({"lang": "node", "code": node, "timeout_ms": 30000}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "object\n", "{out}");
    let stats = h
        .call("sandbox-code-runner::stats", json!({}))
        .await
        .unwrap();
    assert_eq!(stats["python_sdk"]["captures"], 1, "{stats}");
    assert_eq!(stats["python_sdk"]["plants"], 2, "{stats}");
    let relays = h.bench.engine().unwrap().relays_since(since);
    let sandbox_calls: Vec<_> = relays
        .iter()
        .filter(|r| r.function_id.starts_with("sandbox::"))
        .collect();
    let writes = sandbox_calls
        .iter()
        .filter(|r| r.function_id == "sandbox::fs::write")
        .count();
    assert!(
        writes >= 3,
        "the archive twice and the bundle once: {writes}"
    );
    let biggest = sandbox_calls
        .iter()
        .map(|r| (r.request_bytes.max(r.answer_bytes), r.function_id.as_str()))
        .max()
        .unwrap();
    assert!(
        biggest.0 < 256 * 1024,
        "no sandbox::* call carries the SDK: {} bytes in a {} frame",
        biggest.0,
        biggest.1
    );
    h.finish(0).await;
}

/// Every python fork server the worker starts ahead (here, one that loaded
/// the SDK module: it replaced the server the registration started, once a
/// call had planted the SDK) was started without a call's token in its
/// environment and holds no socket: it has connected nothing; only the
/// children it forks for calls do. Servers of other tests on this host are
/// checked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_interpreter_holds_no_token_and_no_connection() {
    let h = Harness::start("").await;
    let source = "def handler(payload):\n    return len(iii.trigger({'function_id': 'engine::functions::list', 'payload': {}})) > 0\n";
    h.call(
        REGISTER,
        json!({"function_id": "pre-e2e::uses", "lang": "python", "source": source}),
    )
    .await
    .unwrap();
    for _ in 0..2 {
        assert_eq!(
            h.call("pre-e2e::uses", json!({})).await.unwrap(),
            json!(true)
        );
    }
    let servers = || pids_with("pre-started python interpreter");
    let waiting = |pid: &str| -> Option<std::path::PathBuf> {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let dir = String::from_utf8_lossy(args.iter().rev().find(|a| !a.is_empty())?);
        let dir = std::path::PathBuf::from(format!("/proc/{pid}/root{dir}"));
        // The server itself, not a child it forked for a call (the pid file
        // holds its pid in the sandbox's own PID namespace).
        let server = std::fs::read_to_string(dir.join("pid")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let inner = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))?
            .split_whitespace()
            .last()?
            .to_string();
        (server.trim() == inner).then_some(dir)
    };
    let mut seen = 0;
    let found = wait_for(Duration::from_secs(20), || async {
        servers().iter().any(|pid| waiting(pid).is_some())
    })
    .await;
    assert!(found, "an interpreter waits for the namespace's next call");
    for pid in servers() {
        let Some(dir) = waiting(&pid) else { continue };
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&environ).contains("III_GUEST_TOKEN="),
            "a pre-started interpreter was started with a guest token"
        );
        let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|fds| {
                fds.flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .filter(|l| l.to_string_lossy().starts_with("socket:"))
                    .count()
            })
            .unwrap_or(0);
        if !dir.exists() {
            continue;
        }
        assert_eq!(sockets, 0, "a waiting interpreter holds a socket");
        seen += 1;
    }
    assert!(seen >= 1, "checked a waiting interpreter");
    h.call(TEARDOWN, json!({"namespace": "pre-e2e", "lang": "python"}))
        .await
        .unwrap();
    h.finish(0).await;
}

/// A fork server that dies costs one cold call and nothing else. (Guest
/// code runs as another user than the server, root, so it cannot kill it:
/// here the host does, while a call forked off it runs.) The call whose
/// fork server is killed while it runs still answers (the child ends the
/// call itself); the next call finds no server and runs cold (a cold
/// exec's parent is the VM's init, PID 1), starting a new server; the call
/// after that is forked off it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_fork_server_costs_one_cold_call_and_nothing_else() {
    let h = Harness::start("").await;
    // With `mark`, the call says it runs (a file in its VM's /tmp) and
    // answers once its server is gone.
    let source = "def handler(payload):\n    import os, select\n    parent = os.getppid()\n    if payload.get('mark'):\n        gone = os.pidfd_open(parent)\n        open(payload['mark'], 'w').close()\n        select.select([gone], [], [], 20)\n    return parent\n";
    h.call(
        REGISTER,
        json!({"function_id": "pre-kill::parent", "lang": "python", "source": source}),
    )
    .await
    .unwrap();
    let parent = |v: Value| v.as_i64().expect("a pid");
    let forked = parent(h.call("pre-kill::parent", json!({})).await.unwrap());
    assert_ne!(
        forked, 1,
        "a call is forked off the server the registration started"
    );
    let mark = format!("/tmp/.scr-e2e-{}", uuid::Uuid::new_v4().simple());
    let killer = {
        let client = h.client.clone();
        let mark = mark.clone();
        tokio::spawn(async move {
            client
                .trigger(iii_sdk::protocol::TriggerRequest {
                    function_id: "pre-kill::parent".into(),
                    payload: json!({"mark": mark}),
                    action: None,
                    timeout_ms: Some(30_000),
                })
                .await
        })
    };
    // The server of the VM that runs the marked call: a python fork server
    // (its children share its command line) whose parent is not one.
    let server = || {
        let servers: Vec<String> = pids_with("/tmp/.scr/pre/")
            .into_iter()
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
                    exe.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("python"))
                })
            })
            .collect();
        servers.iter().find_map(|pid| {
            let root = std::path::Path::new("/proc").join(pid).join("root");
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .to_string();
            (root.join(&mark[1..]).exists() && !servers.contains(&ppid)).then(|| pid.clone())
        })
    };
    assert!(
        wait_for(Duration::from_secs(20), || async { server().is_some() }).await,
        "the marked call runs, forked off a server"
    );
    let pid = server().expect("the server");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let answered = killer
        .await
        .expect("the call's task")
        .expect("the call answered");
    assert_eq!(
        parent(answered),
        forked,
        "the call whose server was killed still answered"
    );
    let cold = parent(h.call("pre-kill::parent", json!({})).await.unwrap());
    assert_eq!(cold, 1, "with no server waiting, the call ran cold");
    let again = parent(h.call("pre-kill::parent", json!({})).await.unwrap());
    assert!(
        again != 1 && again != forked,
        "the cold call started a new server, which forked this one: {again}"
    );
    h.call(TEARDOWN, json!({"namespace": "pre-kill", "lang": "python"}))
        .await
        .unwrap();
    h.finish(0).await;
}

/// A call that dies of a signal reads the same whether it was forked off a
/// waiting server (whose wait status says so) or ran cold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_killed_by_a_signal_reads_the_same_forked_or_cold() {
    let source =
        "def handler(payload):\n    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)\n";
    let mut seen = Vec::new();
    for config in ["", "prestart: false\n"] {
        let h = Harness::start(config).await;
        h.call(
            REGISTER,
            json!({"function_id": "pre-sig::dies", "lang": "python", "source": source}),
        )
        .await
        .unwrap();
        let mut errors = Vec::new();
        for _ in 0..2 {
            errors.push(
                h.call("pre-sig::dies", json!({}))
                    .await
                    .expect_err("the call died"),
            );
        }
        assert_eq!(errors[0], errors[1], "{config:?}");
        assert!(errors[0].message.contains("139"), "{:?}", errors[0]);
        seen.push(errors.remove(0));
        h.call(TEARDOWN, json!({"namespace": "pre-sig", "lang": "python"}))
            .await
            .unwrap();
        h.finish(0).await;
    }
    assert_eq!(seen[0], seen[1]);
}

/// Node interpreters on this host (not the shells and `setsid`s that start
/// them), by VM (the double's mount namespace). One already sent SIGKILL
/// (a relay drops its interpreter with `kill -KILL` once its call ended)
/// is not counted: it is gone as soon as it next runs, and on a busy host
/// that can be after the fill started the one that replaces it.
struct NodeInterpreters {
    /// The most in one VM.
    most: usize,
    /// How many are in the VM whose /tmp has the marker file.
    here: usize,
    /// Of those, how many wait for a call (they hold `in`, fd 3).
    waiting_here: usize,
}

/// Whether `pid` has SIGKILL pending (in its own or its process's pending
/// set, `/proc/<pid>/status`).
fn killed(pid: &str) -> bool {
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|l| {
        let (key, mask) = l.split_once(':').unwrap_or_default();
        matches!(key, "SigPnd" | "ShdPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & SIGKILL_BIT != 0)
    })
}

fn node_interpreters(marker: &str) -> NodeInterpreters {
    let mut by_vm: std::collections::HashMap<String, (usize, bool, usize)> = Default::default();
    for pid in pids_with("/tmp/.scr/pre/ready.mjs") {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/mnt")) else {
            continue;
        };
        if exe.file_name().is_some_and(|n| n == "node") && !killed(&pid) {
            let vm = by_vm.entry(ns.to_string_lossy().into_owned()).or_default();
            vm.0 += 1;
            vm.1 |= std::path::Path::new(&format!("/proc/{pid}/root{marker}")).exists();
            vm.2 += usize::from(std::path::Path::new(&format!("/proc/{pid}/fd/3")).exists());
        }
    }
    let here = by_vm.values().find(|v| v.1).copied().unwrap_or_default();
    NodeInterpreters {
        most: by_vm.values().map(|v| v.0).max().unwrap_or(0),
        here: here.0,
        waiting_here: here.2,
    }
}

/// Node cannot fork, and starting an interpreter takes longer than a call,
/// so a node namespace runtime keeps one interpreter more than its call
/// slots (`handler_concurrency`, 4 by default): calls straight after each
/// other, or as many at once as it has slots, each find one ready, and a
/// new one starts as each call ends. Never more exist in the VM: after a
/// burst of calls, exactly that many wait there. (Pre-started processes:
/// `node_scopes: false`; scope servers are `prestart::scope_tests`'.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runtime_keeps_one_interpreter_more_than_its_slots_and_never_more() {
    let keep = sandbox_code_runner::config::Config::default().handler_concurrency + 1;
    let h = Harness::start("node_scopes: false\n").await;
    let marker = format!("/tmp/.scr-e2e-{}", uuid::Uuid::new_v4().simple());
    let source = format!(
        "import fs from 'node:fs';\nexport function handler() {{ fs.writeFileSync('{marker}', ''); return process.pid; }}\n"
    );
    h.call(
        REGISTER,
        json!({"function_id": "pre-two::pid", "lang": "node", "source": source}),
    )
    .await
    .unwrap();
    let ours = {
        let marker = marker.clone();
        move || {
            let n = node_interpreters(&marker);
            (n.most, n.here)
        }
    };
    let first = h.call("pre-two::pid", json!({})).await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (done, ours) = (done.clone(), ours.clone());
        tokio::task::spawn_blocking(move || {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(ours().0);
            }
            most
        })
    };
    let mut pids = std::collections::BTreeSet::from([first.as_i64()]);
    for _ in 0..6 {
        let pid = h.call("pre-two::pid", json!({})).await.unwrap();
        assert!(
            pids.insert(pid.as_i64()),
            "each call is a fresh process: {pid}"
        );
    }
    let settled = wait_for(Duration::from_secs(20), || {
        let ours = ours.clone();
        async move { ours().1 == keep }
    })
    .await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.await.unwrap();
    assert!(
        settled,
        "{keep} interpreters wait in the runtime: {:?}",
        ours()
    );
    assert!(most <= keep, "{most} node interpreters at once in one VM");
    h.call(TEARDOWN, json!({"namespace": "pre-two", "lang": "node"}))
        .await
        .unwrap();
    h.finish(0).await;
}

/// Calls of one node function at once (as many as its slots) each relay to
/// an interpreter of their own: each answers once, from a fresh process
/// that was waiting for it (none runs cold, none ends another's call), with
/// enough of them waiting before each round. (Pre-started processes:
/// `node_scopes: false`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_calls_at_once_each_answer_once_from_their_own_interpreter() {
    let h = Harness::start("node_scopes: false\n").await;
    let marker = format!("/tmp/.scr-e2e-{}", uuid::Uuid::new_v4().simple());
    let source = format!(
        "import fs from 'node:fs';\nexport async function handler(p) {{\n  fs.writeFileSync('{marker}', '');\n  await new Promise((r) => setTimeout(r, 150));\n  const argv = fs.readFileSync('/proc/self/cmdline', 'utf8');\n  return {{ pid: process.pid, i: p.i, relayed: argv.includes('/tmp/.scr/pre/ready.mjs') }};\n}}\n"
    );
    h.call(
        REGISTER,
        json!({"function_id": "pre-many::pid", "lang": "node", "source": source}),
    )
    .await
    .unwrap();
    let slots = sandbox_code_runner::config::Config::default().handler_concurrency;
    let mut pids = std::collections::BTreeSet::new();
    for round in 0..4 {
        if round > 0 {
            let ready = wait_for(Duration::from_secs(20), || {
                let marker = marker.clone();
                async move { node_interpreters(&marker).waiting_here >= slots }
            })
            .await;
            assert!(ready, "{slots} interpreters wait before round {round}");
        }
        let calls = (0..slots).map(|k| {
            let i = round * slots + k;
            let call = h.call("pre-many::pid", json!({ "i": i }));
            async move { (i, call.await) }
        });
        for (i, answer) in futures_util::future::join_all(calls).await {
            let v = answer.unwrap_or_else(|e| panic!("call {i}: {e:?}"));
            assert_eq!(v["i"], i, "each call answers its own: {v}");
            assert!(pids.insert(v["pid"].as_i64()), "a fresh process each: {v}");
            if round > 0 {
                assert_eq!(v["relayed"], true, "a waiting interpreter served it: {v}");
            }
        }
    }
    h.call(TEARDOWN, json!({"namespace": "pre-many", "lang": "node"}))
        .await
        .unwrap();
    h.finish(0).await;
}

/// Node calls straight after each other in a kept runtime, each relayed to
/// a waiting interpreter that takes the exec's streams itself: every run
/// answers once, with exactly its own output (nothing of the relay's
/// shell, even once interpreters died), while the interpreters for the
/// next calls start in the background and one of those starts may still
/// run when the next call comes. A run past its budget is killed by the
/// relay's watchdog, and the next runs are clean. What a run starts with
/// its streams let go does not hold the run open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_runs_back_to_back_each_answer_once_with_their_own_output() {
    let h = Harness::start("").await;
    let first = h
        // It names `iii`: the SDK is planted, so each interpreter that
        // starts imports it, and its start outlasts a call.
        .run(json!({"lang": "node", "code": "console.log(typeof iii)", "keep": true}))
        .await
        .unwrap();
    let rid = first["runtime_id"].as_str().unwrap().to_string();
    let run = |code: String, timeout_ms: u64| {
        let payload = json!({"runtime_id": rid, "code": code, "timeout_ms": timeout_ms});
        h.run(payload)
    };
    let burst = |from: usize| {
        let run = &run;
        async move {
            for i in from..from + 30 {
                let code = format!("console.log({i}); console.error('e{i}')");
                let out = run(code, 10_000).await.unwrap();
                assert_eq!(out["stdout"], format!("{i}\n"), "{out}");
                assert_eq!(out["stderr"], format!("e{i}\n"), "{out}");
                assert_eq!(out["exit_code"], 0, "{out}");
            }
        }
    };
    burst(0).await;
    let late = run("while (true) {}".into(), 1_500)
        .await
        .expect_err("past its budget");
    assert_eq!(late.code, "sandbox-code-runner::timeout", "{late:?}");
    burst(100).await;
    let detached = "import { spawn } from 'node:child_process';\n\
        spawn('sleep', ['30'], { detached: true, stdio: 'ignore' }).unref();\n\
        console.log('left it');";
    let out = run(detached.into(), 5_000).await.unwrap();
    assert_eq!(out["stdout"], "left it\n", "{out}");
    h.call(TEARDOWN, json!({"runtime_id": rid})).await.unwrap();
    h.finish(0).await;
}
