//! What the guest middleware adds to a guest's call (issue 18): a guest's
//! `iii.trigger` round trip to another worker's function on a guest listener
//! that enforces tenancy (engine → the worker's `guest-middleware` → engine
//! → target, and back) against one without the middleware (engine →
//! target), paired round by round in the same bench run.
//!
//! Two stand-in stacks (tenancy on and off), each with its own worker, a
//! bench-side echo function and a kept node runtime. One round is one run
//! on each stack, in alternating order; the guest times its own calls with
//! `performance.now()` and prints their median, so neither the run around
//! them nor the exec is in the figure.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use code_runner_conformance::standin::client;
use code_runner_conformance::standin::stack::{ListenerLayout, Stack};
use iii_sdk::runtime::FunctionRef;
use iii_sdk::{IIIClient, RegisterFunction};
use serde_json::{json, Value};

use super::*;

/// The function the guests call: a bench-side SDK client's echo.
const ECHO: &str = "bench-echo::echo";
/// Rounds per figure (`SCR_BENCH_PAIRS` overrides, as for every paired
/// figure): each is two runs of ~K round trips.
const ROUNDS: usize = 40;
/// Timed round trips per run, after the one that connects
/// (`SCR_BENCH_GUEST_CALLS` overrides).
const CALLS: usize = 20;
/// The figure's id under the summary's `paired_overhead`.
pub const ID: &str = "guest_trigger_middleware";

/// Node guest code: one untimed call (it connects `iii`), then `calls`
/// timed round trips to the echo; prints their median in ms.
fn guest_code(calls: usize) -> String {
    format!(
        "const K = {calls};\n\
         await iii.trigger({{ function_id: '{ECHO}', payload: {{ i: -1 }} }});\n\
         const t = [];\n\
         for (let i = 0; i < K; i++) {{\n\
         \x20 const s = performance.now();\n\
         \x20 const r = await iii.trigger({{ function_id: '{ECHO}', payload: {{ i }} }});\n\
         \x20 t.push(performance.now() - s);\n\
         \x20 if (r.i !== i) throw new Error('echo answered ' + JSON.stringify(r));\n\
         }}\n\
         t.sort((a, b) => a - b);\n\
         console.log(t[K >> 1]);\n"
    )
}

/// One stack with its worker, echo and kept node runtime.
struct Side {
    stack: Stack,
    client: IIIClient,
    echo: FunctionRef,
    /// The `_caller_worker_id`s the echo has seen.
    callers: Arc<Mutex<BTreeSet<String>>>,
    worker: Worker,
    runtime_id: String,
}

impl Side {
    async fn start(tenancy: bool) -> Side {
        let layout = ListenerLayout::guarded("sandbox-code-runner", 0, tenancy);
        let stack = Stack::start_with_layout(hermetic_options(), layout)
            .await
            .expect("a guest_middleware stack starts");
        let client = client::connect(&stack.url(), "bench-guest-mw")
            .await
            .expect("bench client connects");
        let callers: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let seen = callers.clone();
        let echo = client.register_function(
            ECHO,
            RegisterFunction::new_async(move |input: Value| {
                if let Some(id) = input["_caller_worker_id"].as_str() {
                    seen.lock().unwrap().insert(id.to_string());
                }
                async move { Ok::<Value, iii_sdk::Error>(input) }
            }),
        );
        let routable = client::wait_routable(&client, ECHO, Duration::from_secs(30)).await;
        assert!(routable, "{ECHO} is routable");
        let worker = Worker::spawn_on(
            &stack.url(),
            stack.guest_url(),
            &client,
            "warm_pool: 0\n",
            &[],
        )
        .await;
        let kept = must(
            &client,
            "sandbox-code-runner::run",
            json!({"lang": "node", "code": "console.log(1)", "keep": true}),
        )
        .await;
        let runtime_id = kept["runtime_id"].as_str().expect("runtime_id").to_string();
        Side {
            stack,
            client,
            echo,
            callers,
            worker,
            runtime_id,
        }
    }

    /// One run of `code` in the kept runtime: the median the guest printed.
    async fn round(&self, code: &str) -> f64 {
        let out = must(
            &self.client,
            "sandbox-code-runner::run",
            json!({"runtime_id": self.runtime_id, "code": code, "timeout_ms": 30_000}),
        )
        .await;
        out["stdout"]
            .as_str()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("the guest prints its median: {out}"))
    }

    /// Of the callers the echo has seen, how many are the worker (calls
    /// its middleware forwarded), and how many in all.
    async fn callers_via_worker(&self) -> (usize, usize) {
        let list = must(&self.client, "engine::workers::list", json!({})).await;
        let worker_ids: BTreeSet<&str> = list["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["name"] == "sandbox-code-runner")
            .filter_map(|w| w["id"].as_str())
            .collect();
        let callers = self.callers.lock().unwrap();
        let via = callers
            .iter()
            .filter(|c| worker_ids.contains(c.as_str()))
            .count();
        (via, callers.len())
    }

    async fn stop(self) {
        must(
            &self.client,
            "sandbox-code-runner::teardown",
            json!({"runtime_id": self.runtime_id}),
        )
        .await;
        self.worker.stop().await;
        self.echo.unregister();
        self.client.shutdown_async().await;
        self.stack.shutdown().await;
    }
}

/// The `guest_middleware` group: records `paired_overhead.`[`ID`].
pub fn guest_middleware(rt: &tokio::runtime::Runtime, target: &Target) {
    if !matches!(target, Target::Hermetic(_)) {
        eprintln!("guest_middleware skipped: it starts its own stand-in stacks (hermetic only)");
        return;
    }
    let calls = std::env::var("SCR_BENCH_GUEST_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|k| *k >= 1)
        .unwrap_or(CALLS);
    let code = guest_code(calls);
    let (with, without) =
        rt.block_on(async { (Side::start(true).await, Side::start(false).await) });
    // Untimed: the first run of each runtime plants the node SDK. Then the
    // layouts are checked: only the tenancy stack's guest calls reach the
    // echo through the worker.
    rt.block_on(async {
        with.round(&code).await;
        without.round(&code).await;
        let (via, all) = with.callers_via_worker().await;
        assert!(
            all > 0 && via == all,
            "tenancy: every guest call via the middleware"
        );
        let (via, all) = without.callers_via_worker().await;
        assert!(all > 0 && via == 0, "no tenancy: every guest call direct");
    });
    rt.block_on(floor::paired_diff(
        ID,
        &format!(
            "a guest's iii.trigger round trip to a bench-side echo (median of {calls} \
             in-guest calls per run), with the guest middleware and without"
        ),
        pairs(ROUNDS),
        || with.round(&code),
        || without.round(&code),
    ));
    rt.block_on(async {
        with.stop().await;
        without.stop().await;
    });
}
