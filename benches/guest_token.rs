//! What a guest token costs per run: mint + revoke, the policy lookup, and
//! the auth call a guest connection makes the engine do (through this
//! worker's `guest-auth`), each next to a baseline from the same run.
//!
//! - `guest_token/mint_revoke` vs `guest_token/baseline_uuid`: a token's
//!   whole in-process life against generating one runtime id.
//! - `guest_token/authenticate`: the policy for a live token (the body of
//!   `guest-auth`).
//! - `guest_connect/main_listener` (baseline) vs `guest_connect/guest_listener`:
//!   a WebSocket connect until the engine's greeting, on the stand-in's main
//!   listener vs its guest listener, where the engine first calls
//!   `sandbox-code-runner::guest-auth` on a worker connected through the SDK.
//!
//! `cargo bench --bench guest_token`

use std::sync::Arc;
use std::time::Duration;

use code_runner_conformance::standin::stack::{Stack, StackOptions};
use criterion::Criterion;
use futures_util::StreamExt;
use sandbox_code_runner::bus::SdkBus;
use sandbox_code_runner::config::Config;
use sandbox_code_runner::functions;
use sandbox_code_runner::ids::RuntimeId;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::sandbox::BusSandbox;
use serde_json::json;

async fn greeting(url: &str) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connects");
    let first = ws.next().await.expect("a frame").expect("no error");
    let text = first.into_text().expect("text");
    assert!(text.contains("workerregistered"), "admitted: {text}");
    let _ = ws.close(None).await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let bench = rt
        .block_on(Stack::start(StackOptions::default()))
        .expect("bench");
    let guest_url = bench.guest_url().expect("guest listener");
    let client = rt.block_on(async {
        code_runner_conformance::standin::client::connect(&bench.url(), "bench-guest-auth")
            .await
            .expect("connects")
    });
    let bus = Arc::new(SdkBus::new(client.clone()));
    let manager = Manager::new(
        Arc::new(BusSandbox::new(bus.clone())),
        bus.clone(),
        Config {
            guest_url: Some(guest_url.clone()),
            warm_pool: 0,
            ..Config::default()
        },
        VmNaming::new("bench"),
        bench.url(),
    );
    functions::guest_auth::publish(bus.as_ref(), &manager);
    let engine = bench.engine().expect("stand-in");
    rt.block_on(async {
        code_runner_conformance::standin::wait::until(Duration::from_secs(10), || async {
            engine
                .function_ids("default")
                .iter()
                .any(|f| f == sandbox_code_runner::guest_access::GUEST_AUTH)
        })
        .await
    });

    // A trusted call's token: a fresh lineage at depth 0.
    let mint = |m: &std::sync::Arc<sandbox_code_runner::runtime::Manager>| {
        m.guest_tokens()
            .mint(None, &sandbox_code_runner::tenancy::Lineage::fresh(), 0)
    };
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("guest_token");
        g.bench_function("baseline_uuid", |b| b.iter(RuntimeId::generate));
        g.bench_function("mint_revoke", |b| b.iter(|| drop(mint(&manager))));
        let lease = mint(&manager);
        let input = json!({"headers": {}, "ip_address": "127.0.0.1",
                           "query_params": {"token": [lease.expose()]}});
        // With a live engine's builtins to forbid (about 40 ids).
        let builtins: Vec<String> = (0..40).map(|i| format!("engine::b{i}")).collect();
        g.bench_function("authenticate", |b| {
            b.iter(|| {
                manager
                    .guest_tokens()
                    .authenticate(&input, &builtins)
                    .expect("live")
            })
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("guest_connect");
        let main = bench.url();
        g.bench_function("main_listener", |b| {
            b.to_async(&rt).iter(|| greeting(&main))
        });
        let lease = mint(&manager);
        let with_token = format!("{guest_url}/?token={}", lease.expose());
        g.bench_function("guest_listener", |b| {
            b.to_async(&rt).iter(|| greeting(&with_token))
        });
        g.finish();
    }
    c.final_summary();
    rt.block_on(async {
        client.shutdown_async().await;
        bench.shutdown().await;
    });
}
