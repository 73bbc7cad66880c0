//! The worker benches of issue 11: the python SDK in a fresh VM
//! (`python_iii_cold`), the scaling curve of parallel one-shots against the
//! same number of direct runs, 64 concurrent callers on one handler, and the
//! worker's resident memory per kept runtime.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use iii_sdk::IIIClient;
use sandbox_code_runner::guest;
use sandbox_code_runner::ids::Lang;
use serde_json::{json, Value};

use super::*;

/// Python that uses `iii` for real: import, connect, one bus call.
const PY_III: &str =
    "r = iii.trigger({'function_id': 'engine::functions::info', 'payload': {'function_id': 'sandbox-code-runner::run'}})\nprint(r['function_id'])\n";
/// The same run without `iii`.
const PY_PLAIN: &str = "r = {'function_id': 'sandbox-code-runner::run'}\nprint(r['function_id'])\n";

/// `python_iii_cold`: the first python run that uses `iii` in a fresh VM
/// (one-shot and keep), after the worker's SDK archive is warm, against the
/// same run without `iii` (`…/without/…`, the baseline). Twice: with the
/// warm pool the worker ships with (`oneshot`, `keep`: the pooled VM got
/// the SDK planted before the run), and with no pool at all (`…_no_pool`:
/// every run boots and plants on the caller's path, the worst case).
pub fn python_iii_cold(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    url: &str,
    client: &IIIClient,
    ids: &mut Vec<String>,
) {
    for (suffix, config) in [("", "warm_pool: 1\n"), ("_no_pool", "warm_pool: 0\n")] {
        let pooled = suffix.is_empty();
        let worker = rt.block_on(Worker::spawn(url, client, config));
        // The worker's very first install (pip + archive), paid once.
        let t = Instant::now();
        rt.block_on(must(
            client,
            "sandbox-code-runner::run",
            json!({"lang": "python", "code": PY_III}),
        ));
        record_figure(
            &format!("python_iii_cold/first_install_ms{suffix}"),
            t.elapsed().as_secs_f64() * 1e3,
        );
        let mut g = c.benchmark_group("python_iii_cold");
        g.sample_size(10).measurement_time(Duration::from_secs(8));
        for keep in [false, true] {
            let mode = format!("{}{suffix}", if keep { "keep" } else { "oneshot" });
            for (variant, code) in [("with_iii", PY_III), ("without", PY_PLAIN)] {
                let id = format!("{variant}/{mode}");
                g.bench_function(&id, |b| {
                    b.to_async(rt).iter_custom(|iters| async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            // Untimed: the last run's VM has stopped and,
                            // pooled, the refill is warm with the SDK in it.
                            if pooled {
                                // A python VM with the SDK planted.
                                stat_reaches(client, "/python_sdk/pool_ready_with_sdk", 1).await;
                                settled(client, 2).await;
                            } else {
                                settled(client, 0).await;
                            }
                            let t = Instant::now();
                            let out = must(
                                client,
                                "sandbox-code-runner::run",
                                json!({"lang": "python", "code": code, "keep": keep}),
                            )
                            .await;
                            total += t.elapsed();
                            assert_eq!(out["stdout"], "sandbox-code-runner::run\n", "{out}");
                            if let Some(rid) = out["runtime_id"].as_str() {
                                must(
                                    client,
                                    "sandbox-code-runner::teardown",
                                    json!({"runtime_id": rid}),
                                )
                                .await;
                            }
                        }
                        total
                    })
                });
                ids.push(format!("python_iii_cold/{id}"));
            }
        }
        g.finish();
        let s = rt.block_on(must(client, "sandbox-code-runner::stats", json!({})));
        let sdk = &s["python_sdk"];
        let get = |k: &str| sdk[k].as_f64().unwrap_or(f64::NAN);
        record_figure(
            &format!("python_iii_cold/pip_installs{suffix}"),
            get("pip_installs"),
        );
        record_figure(
            &format!("python_iii_cold/archive_bytes{suffix}"),
            get("archive_bytes"),
        );
        record_figure(
            &format!("python_iii_cold/plant_ms_mean{suffix}"),
            get("plant_ns") / get("plants").max(1.0) / 1e6,
        );
        rt.block_on(worker.stop());
    }
}

/// N parallel one-shot runs (no pool: each boots) against N parallel direct
/// create+exec+stop of the same wrapper and code.
pub fn scaling(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    url: &str,
    client: &IIIClient,
    ids: &mut Vec<String>,
) {
    const PY: &str = "print(2+2)";
    let worker = rt.block_on(Worker::spawn(url, client, "warm_pool: 0\n"));
    let mut g = c.benchmark_group("scaling");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for n in [1u64, 4, 16, 64] {
        g.throughput(Throughput::Elements(n));
        g.bench_with_input(BenchmarkId::new("worker_oneshot", n), &n, |b, &n| {
            b.to_async(rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    settled(client, 0).await;
                    total += parallel_oneshots(client, n, PY).await;
                }
                total
            })
        });
        ids.push(format!("scaling/worker_oneshot/{n}"));
        g.bench_with_input(BenchmarkId::new("direct", n), &n, |b, &n| {
            b.to_async(rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    settled(client, 0).await;
                    let t = Instant::now();
                    let runs = (0..n).map(|_| async {
                        let sid = direct_create(client, "python").await;
                        direct_exec(client, &sid, &guest::run_exec(Lang::Python, PY, 60_000)).await;
                        direct_stop(client, &sid).await;
                    });
                    futures_util::future::join_all(runs).await;
                    total += t.elapsed();
                }
                total
            })
        });
        ids.push(format!("scaling/direct/{n}"));
    }
    g.finish();
    rt.block_on(worker.stop());
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// 64 concurrent callers on one registered function of `lang`: p50 and
/// p99 of each call's latency (the runtime runs one call at a time, so
/// this is also a tight loop of calls into one runtime).
pub fn handler_fan_in(
    rt: &tokio::runtime::Runtime,
    url: &str,
    client: &IIIClient,
    config: &str,
    label: &str,
    lang: &str,
) {
    let config = format!("warm_pool: 0\n{config}");
    let worker = rt.block_on(Worker::spawn(url, client, &config));
    let fid = format!("bench-fanin-{lang}::double");
    let fid = fid.as_str();
    let source = match lang {
        "python" => "def handler(payload):\n    return {\"doubled\": payload[\"n\"] * 2}\n",
        _ => "export function handler(payload) {\n  return { doubled: payload.n * 2 };\n}\n",
    };
    rt.block_on(must(
        client,
        "sandbox-code-runner::register_function",
        json!({"function_id": fid, "lang": lang, "source": source}),
    ));
    let lat = |n: usize, rounds: usize| {
        rt.block_on(async {
            let mut all = Vec::new();
            for _ in 0..rounds {
                let calls = (0..n).map(|_| async {
                    let t = Instant::now();
                    must(client, fid, json!({"n": 21})).await;
                    t.elapsed().as_secs_f64() * 1e3
                });
                all.extend(futures_util::future::join_all(calls).await);
            }
            all.sort_by(|a, b| a.total_cmp(b));
            all
        })
    };
    let one = lat(1, 20);
    let many = lat(64, 3);
    record_figure(&format!("{label}/1_caller_p50_ms"), percentile(&one, 0.5));
    record_figure(
        &format!("{label}/64_callers_p50_ms"),
        percentile(&many, 0.5),
    );
    record_figure(
        &format!("{label}/64_callers_p99_ms"),
        percentile(&many, 0.99),
    );
    rt.block_on(worker.stop());
}

/// Resident memory of a worker process, in bytes (Linux `/proc`).
fn rss_bytes(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

/// CPU time the process has used so far, in ns: the sum over its threads of
/// `/proc/<pid>/task/<tid>/schedstat`'s first field (ns resolution, where
/// `stat`'s utime/stime tick at 10 ms).
fn cpu_ns(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0.0;
    for t in tasks.flatten() {
        let line = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        total += line
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    Some(total)
}

/// The worker's RSS with 0, 100 and 1000 kept runtimes, and the bytes each adds.
pub fn kept_memory(rt: &tokio::runtime::Runtime, url: &str, client: &IIIClient) {
    let worker = rt.block_on(Worker::spawn(url, client, "warm_pool: 0\n"));
    let pid = worker.pid().expect("worker pid");
    let mut kept: Vec<String> = Vec::new();
    let mut points = Vec::new();
    for target in [0usize, 100, 1000] {
        while kept.len() < target {
            let batch = (target - kept.len()).min(50);
            let made: Vec<Value> =
                rt.block_on(futures_util::future::join_all((0..batch).map(|_| {
                    must(
                        client,
                        "sandbox-code-runner::run",
                        json!({"lang": "python", "code": "pass", "keep": true}),
                    )
                })));
            kept.extend(
                made.iter()
                    .filter_map(|v| v["runtime_id"].as_str().map(str::to_string)),
            );
        }
        // A few stats calls let allocator caches settle between points.
        for _ in 0..3 {
            rt.block_on(must(client, "sandbox-code-runner::stats", json!({})));
        }
        let rss = rss_bytes(pid).unwrap_or(f64::NAN);
        record_figure(&format!("kept_memory/rss_bytes/{target}"), rss);
        points.push((target, rss));
    }
    if let (Some((_, r0)), Some((n, rn))) = (points.first(), points.last()) {
        record_figure("kept_memory/bytes_per_runtime", (rn - r0) / *n as f64);
    }
    rt.block_on(worker.stop());
}

/// Where the per-call overhead goes: the paired reuse and handler overheads
/// (python) of a worker as shipped (no live span-start frames), with the
/// SDK's live span-start frames back on, with a 1 s span flush, and with its
/// OpenTelemetry off.
///
/// Each overhead comes with the bare forwarder's floor and, on the hermetic
/// bench, with the daemon's share taken out (`floor::paired_with_floor`):
/// the variants differ by tenths of a millisecond, which only the latter
/// resolves.
pub fn overhead_profile(rt: &tokio::runtime::Runtime, target: &Target, client: &IIIClient) {
    const PY: &str = "print(2+2)";
    let url = &target.url();
    let hop_floor = rt.block_on(super::floor::HopFloor::connect(url));
    let source = "def handler(payload):\n    return {\"doubled\": payload[\"n\"] * 2}\n";
    for (variant, env) in [
        ("as_shipped", vec![]),
        ("otel_live_spans_on", vec![("OTEL_LIVE_SPANS", "true")]),
        (
            "spans_flush_1s",
            vec![("OTEL_SPANS_FLUSH_INTERVAL_MS", "1000")],
        ),
        ("otel_off", vec![("OTEL_ENABLED", "false")]),
    ] {
        let worker = rt.block_on(Worker::spawn_with_env(url, client, "warm_pool: 0\n", &env));
        let kept = rt.block_on(must(
            client,
            "sandbox-code-runner::run",
            json!({"lang": "python", "code": PY, "keep": true}),
        ));
        let rid = kept["runtime_id"].as_str().expect("runtime_id").to_string();
        let fid = format!("bench-profile-{variant}::double");
        rt.block_on(must(
            client,
            "sandbox-code-runner::register_function",
            json!({"function_id": fid, "lang": "python", "source": source}),
        ));
        let sid = rt.block_on(direct_create(client, "python"));
        let path = guest::handler_module_path(Lang::Python, 0, &fid);
        rt.block_on(must(
            client,
            "sandbox::fs::write",
            json!({"sandbox_id": sid, "path": path, "content": source, "parents": true}),
        ));
        let pid = worker.pid().expect("worker pid");
        let n = pairs(150);
        let cpu_before = cpu_ns(pid);
        let reuse_id = format!("profile/{variant}/reuse");
        hop_floor.plan(&reuse_id, &sid, &guest::run_exec(Lang::Python, PY, 10_000));
        rt.block_on(super::floor::paired_with_floor(
            target,
            &reuse_id,
            n,
            || async {
                must(
                    client,
                    "sandbox-code-runner::run",
                    json!({"runtime_id": rid, "code": PY}),
                )
                .await;
            },
            || super::floor::through_floor(client, &reuse_id),
            || async {
                direct_exec(client, &sid, &guest::run_exec(Lang::Python, PY, 10_000)).await;
            },
        ));
        let cpu_mid = cpu_ns(pid);
        let call_id = format!("profile/{variant}/handler");
        hop_floor.plan(
            &call_id,
            &sid,
            &handler_call_exec(Lang::Python, &fid, &path),
        );
        rt.block_on(super::floor::paired_with_floor(
            target,
            &call_id,
            n,
            || async {
                must(client, &fid, json!({"n": 21})).await;
            },
            || super::floor::through_floor(client, &call_id),
            || async {
                direct_exec(client, &sid, &handler_call_exec(Lang::Python, &fid, &path)).await;
            },
        ));
        let cpu_after = cpu_ns(pid);
        // What the worker process itself burns per call (its SDK's span
        // and log export included): precise where the paired wall-clock
        // difference is not.
        if let (Some(a), Some(b), Some(c)) = (cpu_before, cpu_mid, cpu_after) {
            record_figure(
                &format!("profile/{variant}/worker_cpu_us_per_reuse"),
                (b - a) / n as f64 / 1e3,
            );
            record_figure(
                &format!("profile/{variant}/worker_cpu_us_per_handler_call"),
                (c - b) / n as f64 / 1e3,
            );
        }
        rt.block_on(direct_stop(client, &sid));
        rt.block_on(worker.stop());
    }
    rt.block_on(hop_floor.shutdown());
}
