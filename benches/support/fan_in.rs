//! Parallel calls of one published function (issue 33): the same stack and
//! worker twice, one with the shipped `handler_concurrency` and one with a
//! single slot (`handler_concurrency: 1`), both with pre-started
//! interpreters, 64 calls of one function at once, alternated round by round
//! in both orders. Each figure is p50(parallel) / p50(one slot) of the
//! rounds' own p50 latencies, with a 95% bootstrap interval, in the
//! summary's `ratios`:
//!
//! - `fan_in_parallel_io/<lang>`: a handler that waits 20 ms on I/O;
//! - `fan_in_parallel_cpu/<lang>`: a handler that computes for ~5 ms;
//! - `fan_in_fair/python`: one caller's single call while another caller's
//!   64-call burst is queued (made once the burst's first call answered),
//!   over the same call alone (same worker).

use std::time::{Duration, Instant};

use code_runner_conformance::standin::client;
use sandbox_code_runner::ids::Lang;
use serde_json::json;

use super::prestart::{paired_ratio, Side};
use super::*;

const CALLERS: usize = 64;
/// Alternated rounds per ratio (`SCR_BENCH_PAIRS` overrides, capped here:
/// each round is 64 calls).
const ROUNDS: usize = 12;

fn source(lang: Lang, work: &str) -> String {
    match (lang, work) {
        (Lang::Python, "io") => {
            "import time\n\ndef handler(payload):\n    time.sleep(0.02)\n    return payload\n".into()
        }
        (Lang::Node, "io") => "export async function handler(payload) {\n  await new Promise((r) => setTimeout(r, 20));\n  return payload;\n}\n".into(),
        // ~5 ms of arithmetic on this machine's interpreters.
        (Lang::Python, _) => "def handler(payload):\n    n = 0\n    for i in range(60000):\n        n += i * i\n    return {'n': n % 7}\n".into(),
        (Lang::Node, _) => "export function handler(payload) {\n  let n = 0;\n  for (let i = 0; i < 3000000; i++) n += i * i;\n  return { n: n % 7 };\n}\n".into(),
    }
}

/// The p50 latency of `n` calls of `fid` made at once by `side`'s client.
async fn burst_p50(side: &Side, fid: &str, n: usize) -> f64 {
    let calls = (0..n).map(|i| side.timed(fid, json!({"i": i})));
    p50(futures_util::future::join_all(calls).await)
}

async fn register(side: &Side, fid: &str, lang: Lang, src: &str) {
    must(
        &side.client,
        "sandbox-code-runner::register_function",
        json!({"function_id": fid, "lang": lang.as_str(), "source": src}),
    )
    .await;
    // Untimed: the runtime's first calls start its interpreters.
    for _ in 0..3 {
        burst_p50(side, fid, 4).await;
    }
}

/// The daemon's default `memory_mb` (docs/sandbox.md): what a VM with
/// every slot busy must stay inside, with a quarter to spare.
const VM_MEMORY_MIB: f64 = 512.0;

/// Proportional memory (MiB) of the interpreters of one VM on this host
/// (the double's VMs are host processes): calls running, the pre-started
/// ones waiting, their relays.
fn interpreters_pss_mib() -> f64 {
    let markers = [
        "HANDLER wrapper",
        "pre-started python interpreter",
        "/tmp/.scr/pre/ready.mjs",
        "/tmp/.scr/scope/scope.mjs",
        "SCR-RELAY",
    ];
    let mut pids: Vec<String> = markers
        .iter()
        .flat_map(|m| code_runner_conformance::standin::host::pids_with(m))
        .collect();
    pids.sort();
    pids.dedup();
    pids.iter()
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            let line = text.lines().find(|l| l.starts_with("Pss:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .sum::<f64>()
        / 1024.0
}

/// The most memory one runtime's interpreters hold while a burst keeps
/// every slot busy (sampled every 10 ms, untimed).
async fn busy_memory(side: &Side, fid: &str, label: &str) {
    let done = std::sync::atomic::AtomicBool::new(false);
    let sample = async {
        // The sampling period is what this measures by, not a wait.
        let mut every = tokio::time::interval(Duration::from_millis(10));
        let mut most: f64 = 0.0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            every.tick().await;
            most = most.max(interpreters_pss_mib());
        }
        most
    };
    let burst = async {
        burst_p50(side, fid, CALLERS).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    let (most, ()) = tokio::join!(sample, burst);
    record_bounded(
        &format!("fan_in/busy_vm_interpreters_pss_mib/{label}"),
        most,
        VM_MEMORY_MIB * 0.75,
    );
}

/// `fan_in_parallel_io` and `fan_in_parallel_cpu` for `lang` (node's on
/// its default, scope servers).
async fn parallel(parallel: &Side, single: &Side, lang: Lang, work: &str, limit: f64) {
    let label = lang.as_str();
    let fid = format!("bench-fan-{work}-{}::f", lang.as_str());
    let src = source(lang, work);
    register(parallel, &fid, lang, &src).await;
    register(single, &fid, lang, &src).await;
    if work == "io" {
        busy_memory(parallel, &fid, label).await;
    }
    let rounds = pairs(ROUNDS).min(ROUNDS * 4);
    paired_ratio(
        &format!("fan_in_parallel_{work}/{label}"),
        limit,
        rounds,
        || burst_p50(parallel, &fid, CALLERS),
        || burst_p50(single, &fid, CALLERS),
    )
    .await;
}

/// `fan_in_fair/python`: caller B's one call, made once the first of caller
/// A's 64 calls has answered (the rest queued), against B's call alone.
async fn fair(side: &Side) {
    let fid = "bench-fan-fair::f";
    register(side, fid, Lang::Python, &source(Lang::Python, "io")).await;
    let other = client::connect(&side.stack.url(), "bench-fan-fair-b")
        .await
        .expect("a second caller connects");
    let b_alone = || async {
        let t = Instant::now();
        must(&other, fid, json!({"b": true})).await;
        t.elapsed().as_secs_f64() * 1e3
    };
    let b_in_burst = || async {
        // B's call goes out once A's first call has answered: the rest of
        // A's burst is queued behind the slots by then.
        let first_answer = tokio::sync::Notify::new();
        let burst = async {
            let first_answer = &first_answer;
            let calls = (0..CALLERS).map(|i| async move {
                let ms = side.timed(fid, json!({"i": i})).await;
                first_answer.notify_one();
                ms
            });
            futures_util::future::join_all(calls).await
        };
        let b = async {
            first_answer.notified().await;
            let t = Instant::now();
            must(&other, fid, json!({"b": true})).await;
            t.elapsed().as_secs_f64() * 1e3
        };
        tokio::join!(burst, b).1
    };
    paired_ratio(
        "fan_in_fair/python",
        3.0,
        pairs(ROUNDS).min(ROUNDS * 4),
        b_in_burst,
        b_alone,
    )
    .await;
    other.shutdown_async().await;
}

/// The `fan_in` group.
pub fn fan_in(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let parallel_side = Side::start("prestart: true\n").await;
        let single_side = Side::start("prestart: true\nhandler_concurrency: 1\n").await;
        for lang in [Lang::Python, Lang::Node] {
            if !lang_enabled(lang.as_str()) {
                continue;
            }
            parallel(&parallel_side, &single_side, lang, "io", 0.35).await;
            parallel(&parallel_side, &single_side, lang, "cpu", 1.1).await;
        }
        if lang_enabled("python") {
            fair(&parallel_side).await;
        }
        parallel_side.stop().await;
        single_side.stop().await;
    });
}
