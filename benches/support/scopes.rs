//! Node's scope servers (issue 43, `node_scopes: true`) against node's
//! pre-started processes (`node_scopes: false`), in the same run, both
//! with pre-started interpreters. Each figure is a paired ratio (p50 with a
//! 95% bootstrap interval) in the summary's `ratios`:
//!
//! - `node_scopes/handler_back_to_back`: a node echo handler called back to
//!   back, scopes over processes;
//! - `node_scopes/node_over_python`: the same node call on scopes over the
//!   same python call (fork server), same worker (limit 1.5);
//! - `node_scopes/host_cpu_per_call`: the host's CPU per back-to-back call
//!   (`/proc/stat`: the double's VM processes, plus the worker, engine and
//!   double, which cost the same on both sides), scopes over processes
//!   (limit 1/3).
//!
//! Scopes are the default, so the `fan_in` group's node figures (64
//! callers, every slot over one slot, and the busy VM's memory) are
//! theirs.

use sandbox_code_runner::ids::Lang;
use serde_json::json;

use super::prestart::{paired_ratio, Side};
use super::*;

/// Back-to-back calls per round of the CPU figure.
const CALLS_PER_ROUND: usize = 10;

fn echo(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "def handler(payload):\n    return payload\n",
        Lang::Node => "export function handler(payload) {\n  return payload;\n}\n",
    }
}

async fn register(side: &Side, fid: &str, lang: Lang) {
    must(
        &side.client,
        "sandbox-code-runner::register_function",
        json!({"function_id": fid, "lang": lang.as_str(), "source": echo(lang)}),
    )
    .await;
    // Untimed: the runtime's first calls start its servers.
    for _ in 0..6 {
        side.timed(fid, json!({"n": 0})).await;
    }
}

/// Busy CPU time of the whole host so far, in ms (`/proc/stat`'s first
/// line: user, nice, system, irq, softirq, steal).
fn host_busy_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: f64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| ticks.get(*i))
        .sum();
    // USER_HZ is 100 on Linux.
    busy * 10.0
}

/// The host's CPU per call (ms) over a round of back-to-back calls.
async fn cpu_per_call(side: &Side, fid: &str) -> f64 {
    let before = host_busy_ms();
    for i in 0..CALLS_PER_ROUND {
        side.timed(fid, json!({"i": i})).await;
    }
    (host_busy_ms() - before) / CALLS_PER_ROUND as f64
}

/// The `node_scopes` group.
pub fn node_scopes(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let scopes = Side::start("prestart: true\nnode_scopes: true\n").await;
        let processes = Side::start("prestart: true\nnode_scopes: false\n").await;
        let node = "bench-scopes-node::echo";
        let python = "bench-scopes-py::echo";
        register(&scopes, node, Lang::Node).await;
        register(&scopes, python, Lang::Python).await;
        register(&processes, node, Lang::Node).await;
        let n = pairs(100);
        paired_ratio(
            "node_scopes/handler_back_to_back",
            1.0,
            n,
            || scopes.timed(node, json!({"n": 1})),
            || processes.timed(node, json!({"n": 1})),
        )
        .await;
        paired_ratio(
            "node_scopes/node_over_python",
            1.5,
            n,
            || scopes.timed(node, json!({"n": 1})),
            || scopes.timed(python, json!({"n": 1})),
        )
        .await;
        paired_ratio(
            "node_scopes/host_cpu_per_call",
            1.0 / 3.0,
            pairs(20).min(40),
            || cpu_per_call(&scopes, node),
            || cpu_per_call(&processes, node),
        )
        .await;
        processes.stop().await;
        scopes.stop().await;
    });
}
