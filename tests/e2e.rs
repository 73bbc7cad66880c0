//! End-to-end: the worker binary over the hermetic bench, called through the
//! engine like any caller. Seed 000's examples run as written.

mod common;

use std::time::Duration;

use common::{wait_for, Harness};
use serde_json::{json, Value};

const RUN: &str = "sandbox-code-runner::run";
const REGISTER: &str = "sandbox-code-runner::register_function";
const TEARDOWN: &str = "sandbox-code-runner::teardown";

fn code(e: &common::CallError) -> &str {
    e.code.as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_print() {
    let h = Harness::start("").await;
    let out = h
        .run(json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
    assert_eq!(out["stderr"], "");
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["success"], true);
    assert!(out["duration_ms"].is_u64());
    assert!(
        out.get("runtime_id").is_none(),
        "one-shot answers carry no runtime_id"
    );
    assert_eq!(
        h.live_sandboxes(),
        0,
        "the one-shot VM is stopped before the answer"
    );

    let out = h
        .run(
            json!({"lang": "node", "code": "const x = await Promise.resolve(6*7); console.log(x)"}),
        )
        .await
        .unwrap();
    assert_eq!(
        out["stdout"], "42\n",
        "node code is an ES module with top-level await"
    );

    let out = h
        .run(json!({"lang": "python", "code": "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)"}))
        .await
        .unwrap();
    assert_eq!(out["success"], false, "a failing script is a response");
    assert_eq!(out["exit_code"], 3);
    assert_eq!(out["stderr"], "bad\n");
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_then_reuse_shares_files_not_variables() {
    let h = Harness::start("").await;
    let out = h
        .run(json!({"lang": "python", "code": "x = 41\nopen('/tmp/x','w').write('hello')\nprint(2+2)", "keep": true}))
        .await
        .unwrap();
    let id = out["runtime_id"]
        .as_str()
        .expect("keep returns runtime_id")
        .to_string();
    assert!(id.starts_with("rt-"));
    let out = h
        .run(json!({"runtime_id": id, "code": "print(open(\"/tmp/x\").read())"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "hello\n");
    assert_eq!(out["runtime_id"], id.as_str());
    let out = h
        .run(json!({"runtime_id": id, "code": "print(x)"}))
        .await
        .unwrap();
    assert_eq!(
        out["success"], false,
        "variables do not survive between runs"
    );
    assert!(out["stderr"].as_str().unwrap().contains("NameError"));
    let e = h
        .run(json!({"runtime_id": id, "lang": "node", "code": "1"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::invalid_request");
    assert_eq!(h.live_sandboxes(), 1);

    let t = h.call(TEARDOWN, json!({"runtime_id": id})).await.unwrap();
    assert_eq!(
        t,
        json!({"runtime_id": id, "torn_down": true, "unregistered": []})
    );
    let e = h
        .run(json!({"runtime_id": id, "code": "1"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::runtime_not_found");
    assert!(e
        .message
        .starts_with("sandbox-code-runner::runtime_not_found"));
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_keep_run_returns_no_runtime_and_leaves_no_vm() {
    let h = Harness::start("").await;
    let out = h
        .run(json!({"lang": "node", "code": "process.exit(2)", "keep": true}))
        .await
        .unwrap();
    assert_eq!(out["success"], false);
    assert!(out.get("runtime_id").is_none());
    assert_eq!(h.live_sandboxes(), 0);
    h.finish(0).await;
}

const DOUBLE: &str = "def handler(payload):\n    return {\"doubled\": payload[\"n\"] * 2}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_call_and_teardown_a_namespace() {
    let h = Harness::start("").await;
    let out = h
        .call(
            REGISTER,
            json!({
                "function_id": "my-app::double",
                "lang": "python",
                "description": "Double a number. Payload: { n: number }.",
                "source": DOUBLE,
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        json!({"function_id": "my-app::double", "registered": true})
    );
    let v = h.call("my-app::double", json!({"n": 21})).await.unwrap();
    assert_eq!(v, json!({"doubled": 42}));

    // The handler sees exactly the caller's payload.
    h.call(
        REGISTER,
        json!({"function_id": "my-app::echo", "lang": "python", "source": "def handler(payload):\n    print('noise')\n    return payload"}),
    )
    .await
    .unwrap();
    let v = h
        .call("my-app::echo", json!({"a": [1, "x"]}))
        .await
        .unwrap();
    assert_eq!(
        v,
        json!({"a": [1, "x"]}),
        "_caller_worker_id stripped, prints not returned"
    );

    // Taken ids, across languages.
    let e = h
        .call(REGISTER, json!({"function_id": "my-app::double", "lang": "node", "source": "export const handler = p => p"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::invalid_request");

    // A node handler in the same namespace gets its own runtime.
    h.call(
        REGISTER,
        json!({"function_id": "my-app::greet", "lang": "node", "source": "export async function handler(p) { return {hi: p.name} }"}),
    )
    .await
    .unwrap();
    assert_eq!(
        h.call("my-app::greet", json!({"name": "ada"}))
            .await
            .unwrap(),
        json!({"hi": "ada"})
    );
    assert_eq!(h.live_sandboxes(), 2);

    // Handler failures.
    h.call(
        REGISTER,
        json!({"function_id": "my-app::boom", "lang": "python", "source": "def handler(payload):\n    raise ValueError('nope')"}),
    )
    .await
    .unwrap();
    let e = h.call("my-app::boom", json!({})).await.unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::handler_error");
    h.call(
        REGISTER,
        json!({"function_id": "my-app::set", "lang": "python", "source": "def handler(payload):\n    return {1, 2}"}),
    )
    .await
    .unwrap();
    let e = h.call("my-app::set", json!({})).await.unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::handler_error");

    // No handler: refused, never published.
    let e = h
        .call(
            REGISTER,
            json!({"function_id": "my-app::none", "lang": "python", "source": "x = 1"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::invalid_request");
    let e = h.call("my-app::none", json!({})).await.unwrap_err();
    assert_eq!(code(&e), "function_not_found");

    let t = h
        .call(TEARDOWN, json!({"namespace": "my-app"}))
        .await
        .unwrap();
    assert_eq!(
        t,
        json!({
            "namespace": "my-app::",
            "torn_down": true,
            "unregistered": ["my-app::boom", "my-app::double", "my-app::echo", "my-app::greet", "my-app::set"]
        })
    );
    let e = h.call("my-app::double", json!({"n": 1})).await.unwrap_err();
    assert_eq!(code(&e), "function_not_found");
    let e = h
        .call(TEARDOWN, json!({"namespace": "my-app::"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::runtime_not_found");
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_needs_exactly_one_address() {
    let h = Harness::start("").await;
    for payload in [json!({}), json!({"runtime_id": "rt-x", "namespace": "a"})] {
        let e = h.call(TEARDOWN, payload).await.unwrap_err();
        assert_eq!(code(&e), "sandbox-code-runner::invalid_request");
        assert!(
            e.message.contains("runtime_id") && e.message.contains("namespace"),
            "{}",
            e.message
        );
    }
    let e = h
        .call(
            TEARDOWN,
            json!({"runtime_id": "rt-00000000-0000-4000-8000-000000000000"}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::runtime_not_found");
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaped_runtimes_expire_lazily() {
    let h = Harness::start("idle_ttl_secs: 1\n").await;
    let out = h
        .run(json!({"lang": "python", "code": "print(1)", "keep": true}))
        .await
        .unwrap();
    let id = out["runtime_id"].as_str().unwrap().to_string();
    h.call(
        REGISTER,
        json!({"function_id": "ttl-app::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    let reaped = wait_for(Duration::from_secs(20), || async {
        h.live_sandboxes() == 0
    })
    .await;
    assert!(reaped, "the daemon reaps idle VMs");
    // Lazy: the stale function is still listed until something calls it.
    let engine = h.bench.engine().unwrap();
    assert!(engine
        .function_ids("default")
        .contains(&"ttl-app::double".to_string()));
    let e = h
        .call("ttl-app::double", json!({"n": 1}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::expired");
    let gone = wait_for(Duration::from_secs(10), || async {
        !engine
            .function_ids("default")
            .contains(&"ttl-app::double".to_string())
    })
    .await;
    assert!(gone, "expired functions are unregistered");
    let e = h
        .run(json!({"runtime_id": id, "code": "1"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::expired");
    let e = h
        .run(json!({"runtime_id": id, "code": "1"}))
        .await
        .unwrap_err();
    assert_eq!(
        code(&e),
        "sandbox-code-runner::runtime_not_found",
        "the id is forgotten after expiry"
    );
    // The namespace's next registration boots a fresh runtime.
    h.call(
        REGISTER,
        json!({"function_id": "ttl-app::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    assert_eq!(
        h.call("ttl-app::double", json!({"n": 2})).await.unwrap(),
        json!({"doubled": 4})
    );
    h.finish(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_forgets_ids_and_sweeps_orphans() {
    let mut h = Harness::start("vm_owner: e2e-restart\n").await;
    let out = h
        .run(json!({"lang": "python", "code": "print(1)", "keep": true}))
        .await
        .unwrap();
    let id = out["runtime_id"].as_str().unwrap().to_string();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_errors_and_clamped() {
    let h = Harness::start("default_timeout_ms: 60000\nmax_timeout_ms: 1500\n").await;
    let started = std::time::Instant::now();
    let e = h
        .run(json!({"lang": "python", "code": "import time\ntime.sleep(30)"}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::timeout");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the default is clamped to the max"
    );
    assert_eq!(h.live_sandboxes(), 0);
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_iii_from_node_runs_and_handlers() {
    let h = Harness::start("").await;
    let out = h
        .run(json!({
            "lang": "node",
            "code": "const r = await iii.trigger({function_id: 'engine::functions::list', payload: {}});\nconsole.log(r.functions.some(f => f.function_id === 'sandbox-code-runner::run'))",
            "timeout_ms": 20000,
        }))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "true\n", "stderr: {}", out["stderr"]);

    // Two concurrent guests both using iii: unique worker names.
    let code = "const r = await iii.trigger({function_id: 'engine::functions::info', payload: {function_id: 'sandbox-code-runner::run'}}); console.log(r.function_id)";
    let (a, b) = tokio::join!(
        h.run(json!({"lang": "node", "code": code, "timeout_ms": 20000})),
        h.run(json!({"lang": "node", "code": code, "timeout_ms": 20000}))
    );
    for out in [a.unwrap(), b.unwrap()] {
        assert_eq!(
            out["stdout"], "sandbox-code-runner::run\n",
            "stderr: {}",
            out["stderr"]
        );
    }

    // A handler that calls another runtime's function through iii.
    h.call(
        REGISTER,
        json!({"function_id": "calc::double", "lang": "python", "source": DOUBLE}),
    )
    .await
    .unwrap();
    h.call(
        REGISTER,
        json!({
            "function_id": "front::quad",
            "lang": "node",
            "source": "export async function handler(p) { const d = await iii.trigger({function_id: 'calc::double', payload: {n: p.n}}); return {quad: d.doubled * 2} }",
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        h.call("front::quad", json!({"n": 5})).await.unwrap(),
        json!({"quad": 20})
    );
    h.finish(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_calling_its_own_runtime_times_out() {
    let h = Harness::start("default_timeout_ms: 3000\n").await;
    h.call(REGISTER, json!({"function_id": "self::inner", "lang": "node", "source": "export const handler = () => ({ok: true})"}))
        .await
        .unwrap();
    h.call(
        REGISTER,
        json!({
            "function_id": "self::outer",
            "lang": "node",
            "source": "export async function handler() { return await iii.trigger({function_id: 'self::inner', payload: {}, timeoutMs: 20000}) }",
        }),
    )
    .await
    .unwrap();
    let e = h.call("self::outer", json!({})).await.unwrap_err();
    assert_eq!(code(&e), "sandbox-code-runner::timeout", "{}", e.message);
    h.finish(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_iii_from_python() {
    let h = Harness::start("").await;
    let out = h
        .run(json!({
            "lang": "python",
            "code": "r = iii.trigger({'function_id': 'engine::functions::info', 'payload': {'function_id': 'sandbox-code-runner::run'}})\nprint(r['function_id'])",
            "timeout_ms": 30000,
        }))
        .await
        .unwrap();
    assert_eq!(
        out["stdout"], "sandbox-code-runner::run\n",
        "stderr: {}",
        out["stderr"]
    );
    h.call(REGISTER, json!({"function_id": "calc::double", "lang": "node", "source": "export const handler = p => ({doubled: p.n * 2})"}))
        .await
        .unwrap();
    h.call(
        REGISTER,
        json!({
            "function_id": "py-front::quad",
            "lang": "python",
            "source": "def handler(p):\n    d = iii.trigger({'function_id': 'calc::double', 'payload': {'n': p['n']}})\n    return {'quad': d['doubled'] * 2}",
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        h.call("py-front::quad", json!({"n": 5})).await.unwrap(),
        json!({"quad": 20})
    );
    // Code that never names iii pays nothing: no SDK import.
    let out = h
        .run(json!({"lang": "python", "code": "import sys\nprint('iii' in sys.modules)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "False\n");
    h.finish(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_capped() {
    let h = Harness::start("max_stream_bytes: 1000\n").await;
    let out = h
        .run(json!({"lang": "python", "code": "for i in range(5000): print('line', i)"}))
        .await
        .unwrap();
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("line 0\n"));
    assert!(stdout.ends_with("line 4999\n"));
    assert_eq!(stdout.matches("[…stdout truncated: was ~").count(), 1);
    assert!(stdout.len() < 1200);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_daemon_is_an_engine_error_until_it_appears() {
    use code_runner_conformance::engine::StandInEngine;
    // An engine without iii-sandbox: boot warns, calls fail with `engine`.
    let engine = StandInEngine::start(0).await.unwrap();
    let dir = std::env::temp_dir().join(format!("scr-nodaemon-{:x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("worker.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandbox-code-runner"))
        .arg("--url")
        .arg(engine.url())
        .stderr(std::process::Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let warned = wait_for(Duration::from_secs(30), || async {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .contains("iii-sandbox is not connected")
    })
    .await;
    assert!(warned, "a loud warning at boot");
    let client = code_runner_conformance::client::connect(&engine.url(), "nodaemon-caller")
        .await
        .unwrap();
    let call = || async {
        client
            .trigger(iii_sdk::protocol::TriggerRequest {
                function_id: RUN.into(),
                payload: json!({"lang": "python", "code": "print(2+2)"}),
                action: None,
                timeout_ms: Some(60_000),
            })
            .await
    };
    match call().await {
        Err(iii_sdk::Error::Remote { code, message, .. }) => {
            assert_eq!(code, "sandbox-code-runner::engine");
            assert!(
                message.contains("iii trigger compose::add worker=iii-sandbox"),
                "{message}"
            );
        }
        other => panic!("expected an engine error, got {other:?}"),
    }
    // The daemon appears: the same worker serves, no restart.
    let double = code_runner_conformance::sandbox_double::SandboxDouble::start(
        &engine.url(),
        common::test_limits(),
    )
    .await
    .unwrap();
    let out = call().await.expect("serves once the daemon is there");
    assert_eq!(out["stdout"], "4\n");
    let _ = worker.kill().await;
    client.shutdown_async().await;
    double.shutdown().await;
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
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
    let settled = wait_for(Duration::from_secs(20), || async {
        h.live_sandboxes() == 2
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
    let js = h
        .call(
            "sandbox-code-runner::ui-content",
            json!({"path": "sandbox-code-runner/cards.js"}),
        )
        .await
        .unwrap();
    assert!(js["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(js["content"]
        .as_str()
        .unwrap()
        .contains("SandboxCodeRunnerUI"));
    let css = h
        .call(
            "sandbox-code-runner::ui-content",
            json!({"path": "sandbox-code-runner/cards.css"}),
        )
        .await
        .unwrap();
    assert!(css["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/css"));
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
    let out = h
        .run(json!({"lang": "python", "code": "print(1)", "keep": true}))
        .await
        .unwrap();
    let id = out["runtime_id"].as_str().unwrap().to_string();
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
