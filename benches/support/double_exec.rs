//! `double_exec`: what one bare `sandbox::exec` of `true` costs on a running
//! sandbox of the daemon double (no worker involved): the wall time per
//! call, the double's share of it (the stand-in engine's forward-to-answer
//! time), and the CPU the whole bench process tree spends per exec (this
//! process, where the double runs, and every process it started: the
//! sandboxes' processes included). On the real daemon the same call is a
//! process start in a guest that is already up.
//!
//! `SCR_BENCH_GROUPS=double_exec cargo bench --bench worker`

use std::time::Instant;

use criterion::Criterion;
use iii_sdk::IIIClient;
use serde_json::json;

use super::*;

/// Execs per manual round (each figure is a median or mean over them).
const EXECS: usize = 200;

/// CPU seconds of this process and all its live descendants, each with its
/// reaped children's (`/proc/<pid>/stat`: utime, stime, cutime, cstime, in
/// USER_HZ, which Linux fixes at 100).
pub fn tree_cpu_secs() -> f64 {
    const USER_HZ: f64 = 100.0;
    let me = std::process::id();
    let stats: Vec<(u32, u32, f64)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
            // After `(comm)`: state ppid … utime(11) stime(12) cutime(13) cstime(14).
            let ppid = rest.get(1)?.parse().ok()?;
            let ticks: f64 = (11..15)
                .filter_map(|i| rest.get(i)?.parse::<f64>().ok())
                .sum();
            Some((pid, ppid, ticks / USER_HZ))
        })
        .collect();
    let parent: BTreeMap<u32, u32> = stats.iter().map(|(p, pp, _)| (*p, *pp)).collect();
    let in_tree = |mut p: u32| {
        for _ in 0..64 {
            if p == me {
                return true;
            }
            match parent.get(&p) {
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    stats
        .iter()
        .filter(|(p, _, _)| in_tree(*p))
        .map(|(_, _, s)| s)
        .sum()
}

/// One exec of `true` in `sid`, checked.
async fn exec_true(client: &IIIClient, sid: &str) {
    let out = must(
        client,
        "sandbox::exec",
        json!({"sandbox_id": sid, "argv": ["true"], "timeout_ms": 10_000}),
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
}

/// The `double_exec` group: a criterion bench per network mode, then
/// [`EXECS`] timed execs for the median and the CPU figures.
pub fn double_exec(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    target: &Target,
    client: &IIIClient,
    ids: &mut Vec<String>,
) {
    let mut g = c.benchmark_group("double_exec");
    for network in [false, true] {
        let variant = if network { "true_network" } else { "true" };
        let sid = rt.block_on(must(
            client,
            "sandbox::create",
            json!({"image": "python", "network": network, "name": "bench-double-exec"}),
        ))["sandbox_id"]
            .as_str()
            .expect("sandbox_id")
            .to_string();
        // The first exec pays the modelled boot.
        rt.block_on(exec_true(client, &sid));
        g.bench_function(variant, |b| b.to_async(rt).iter(|| exec_true(client, &sid)));
        ids.push(format!("double_exec/{variant}"));

        let since = Instant::now();
        let cpu = tree_cpu_secs();
        let mut walls = Vec::with_capacity(EXECS);
        rt.block_on(async {
            for _ in 0..EXECS {
                let t = Instant::now();
                exec_true(client, &sid).await;
                walls.push(t.elapsed().as_secs_f64() * 1e3);
            }
        });
        let cpu_ms = (tree_cpu_secs() - cpu) * 1e3 / EXECS as f64;
        record_figure(&format!("double_exec/{variant}/wall_p50_ms"), p50(walls));
        record_figure(&format!("double_exec/{variant}/cpu_ms_per_exec"), cpu_ms);
        if let Some(share) = target.exec_ms_since(since) {
            record_figure(
                &format!("double_exec/{variant}/double_share_ms_mean"),
                share / EXECS as f64,
            );
        }
        rt.block_on(direct_stop(client, &sid));
    }
    g.finish();
}
