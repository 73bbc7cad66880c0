//! `list_runtimes` latency with 1,000 kept runtimes, against baselines taken
//! in the same run: the `stats` handler (the cheapest function on the same
//! publish/encode path) and `list_runtimes` with no runtime at all.
//!
//! The manager runs in-process over the tests' in-memory `sandbox::*`
//! (tests/fakes), whose `list` answers at once, so the figure is the worker's own cost: one list call,
//! building and sorting 1,000 entries, and encoding the answer. Transport
//! of the answer over the bus comes on top (see benches/worker.rs for the
//! per-call bus overhead).
//!
//!   cargo bench --bench inventory

#[path = "../tests/fakes/mod.rs"]
mod fakes;

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use fakes::{FakeBus, FakeSandbox};
use sandbox_code_runner::config::Config;
use sandbox_code_runner::functions;
use sandbox_code_runner::ids::Lang;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use serde_json::{json, Value};

/// A manager with `kept` kept runtimes, and its bus.
async fn world(kept: usize) -> (Arc<Manager>, Arc<FakeBus>) {
    let bus = Arc::new(FakeBus::default());
    let manager = Manager::new(
        FakeSandbox::bare(),
        bus.clone(),
        Config {
            warm_pool: 0,
            ..Config::default()
        },
        VmNaming::new("bench"),
        "ws://127.0.0.1:1".into(),
    );
    functions::publish_all(bus.as_ref(), &manager);
    for i in 0..kept {
        let lang = if i % 3 == 0 { Lang::Node } else { Lang::Python };
        manager
            .run_fresh(lang, "print(1)", true, 5_000)
            .await
            .expect("a kept run");
    }
    (manager, bus)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (empty_manager, empty) = rt.block_on(world(0));
    let (manager, full) = rt.block_on(world(1_000));
    assert_eq!(manager.runtime_count(), 1_000);
    let list = full.handler(functions::LIST_RUNTIMES);
    let answer = rt.block_on(list(json!({}))).expect("list_runtimes");
    assert_eq!(answer["runtimes"].as_array().map(Vec::len), Some(1_000));
    eprintln!(
        "list_runtimes with 1,000 kept runtimes: {} bytes of JSON",
        answer.to_string().len()
    );

    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut g = c.benchmark_group("inventory");
    let stats = full.handler(functions::STATS);
    g.bench_function("baseline_stats_handler", |b| {
        b.to_async(&rt)
            .iter(|| async { stats(json!({})).await.unwrap() })
    });
    let list0 = empty.handler(functions::LIST_RUNTIMES);
    g.bench_function("list_runtimes/0", |b| {
        b.to_async(&rt)
            .iter(|| async { list0(json!({})).await.unwrap() })
    });
    g.bench_function("list_runtimes/1000_kept", |b| {
        b.to_async(&rt)
            .iter(|| async { list(json!({})).await.unwrap() })
    });
    g.finish();
    c.final_summary();
    drop((empty_manager, manager));
    report();
}

/// Criterion's mean estimate of `name` in this run, in nanoseconds.
fn mean_ns(name: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let path = dir
        .join("criterion")
        .join("inventory")
        .join(name)
        .join("new")
        .join("estimates.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

/// The figures as ratios against the baselines of the same run.
fn report() {
    let (Some(base), Some(zero), Some(full)) = (
        mean_ns("baseline_stats_handler"),
        mean_ns("list_runtimes_0"),
        mean_ns("list_runtimes_1000_kept"),
    ) else {
        eprintln!("inventory: no criterion estimates to compare (filtered run?)");
        return;
    };
    eprintln!(
        "inventory: list_runtimes with 1,000 kept runtimes {:.2} ms = {:.1}x list_runtimes with none ({:.1} us) = {:.1}x the stats handler ({:.1} us)",
        full / 1e6,
        full / zero,
        zero / 1e3,
        full / base,
        base / 1e3
    );
}
