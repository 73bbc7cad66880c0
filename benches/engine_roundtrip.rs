//! Trigger round trip through the stand-in engine: a Rust SDK client calling
//! a Rust SDK worker, the way `docs/engine.md` measured the
//! real engine (median 0.55 ms for the Rust SDK on a 2-core machine).
//!
//! The same round trip after 2, 10 and 40 ms of idleness shows what a
//! back-to-back figure hides: between the hops of a run, the exec leaves the
//! path's threads idle for that long, and waking an idle CPU (on a VM: a
//! halted vCPU) costs more than passing a frame to a busy one. That, not
//! the back-to-back figure, is the hop a worker adds to each call (see
//! `benches/support/floor.rs`).
//!
//! `cargo bench --bench engine_roundtrip`

use std::time::{Duration, Instant};

use code_runner_conformance::standin::engine::StandInEngine;
use criterion::{criterion_group, criterion_main, Criterion};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::RegisterFunction;
use serde_json::{json, Value};

fn roundtrip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (engine, caller, worker) = rt.block_on(async {
        let engine = StandInEngine::start(0).await.expect("engine");
        let worker =
            code_runner_conformance::standin::client::connect(&engine.url(), "bench-worker")
                .await
                .expect("worker");
        worker.register_function(
            "bench::echo",
            RegisterFunction::new_async(|v: Value| async move { Ok(v) }),
        );
        let caller =
            code_runner_conformance::standin::client::connect(&engine.url(), "bench-caller")
                .await
                .expect("caller");
        let routable = code_runner_conformance::standin::client::wait_routable(
            &caller,
            "bench::echo",
            Duration::from_secs(10),
        )
        .await;
        assert!(routable, "bench::echo is routable");
        (engine, caller, worker)
    });
    let mut group = c.benchmark_group("engine");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("trigger_roundtrip_rust_sdk", |b| {
        b.to_async(&rt).iter(|| echo(&caller))
    });
    for idle_ms in [2u64, 10, 40] {
        group.bench_function(format!("trigger_roundtrip_after_idle_{idle_ms}ms"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let caller = &caller;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // The idle gap is the point of this bench, not a
                        // synchronisation: only the round trip is timed.
                        tokio::time::sleep(Duration::from_millis(idle_ms)).await;
                        let t = Instant::now();
                        echo(caller).await;
                        total += t.elapsed();
                    }
                    total
                }
            })
        });
    }
    group.finish();
    rt.block_on(async {
        caller.shutdown_async().await;
        worker.shutdown_async().await;
        engine.shutdown().await;
    });
}

async fn echo(caller: &iii_sdk::IIIClient) -> Value {
    caller
        .trigger(TriggerRequest {
            function_id: "bench::echo".into(),
            payload: json!({"msg": "hello"}),
            action: None,
            timeout_ms: Some(5_000),
        })
        .await
        .expect("echo answers")
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);
