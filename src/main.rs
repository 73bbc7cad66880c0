//! The `sandbox-code-runner` binary: connect, publish, serve, and on SIGTERM
//! stop every VM this process owns.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use iii_sdk::runtime::WorkerMetadata;
use iii_sdk::{register_worker, InitOptions, WorkerIdentityMode};

use sandbox_code_runner::bus::SdkBus;
use sandbox_code_runner::config::Config;
use sandbox_code_runner::functions;
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::sandbox::{BusSandbox, SandboxApi, SandboxError, INSTALL_HINT};
use sandbox_code_runner::settings::Settings;

/// Run Node.js and Python in iii-sandbox microVMs, as an iii worker.
#[derive(Parser, Debug)]
#[command(name = "sandbox-code-runner", version)]
struct Args {
    /// iii engine URL.
    #[arg(long, env = "III_URL", default_value = "ws://127.0.0.1:49134")]
    url: String,
    /// YAML config file (default_timeout_ms, max_timeout_ms, idle_ttl_secs,
    /// max_stream_bytes, sdk_install_timeout_ms, vm_owner).
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    // The SDK records handler inputs and outputs on its trace spans by
    // default. Ours carry runtime ids (a capability) and guest output, so
    // spans keep their timing and lose their payloads. Set before any thread
    // exists; the SDK reads it per invocation.
    std::env::set_var("III_DISABLE_TRACE_PAYLOADS", "1");
    // The SDK also sends one live "span started" frame per span, two per
    // call here (the invocation and its sandbox::exec), on the connection
    // thread that serves every call: measured as part of the per-call
    // overhead (benches: overhead_profile). Finished spans still go out in
    // batches. An operator's OTEL_LIVE_SPANS wins.
    if std::env::var_os("OTEL_LIVE_SPANS").is_none() {
        std::env::set_var("OTEL_LIVE_SPANS", "false");
    }
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(serve(args.url, config))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "host".into())
}

async fn serve(url: String, config: Config) -> ExitCode {
    let owner = config.vm_owner.clone().unwrap_or_else(host_name);
    let client = register_worker(
        &url,
        InitOptions {
            metadata: Some(WorkerMetadata {
                name: "sandbox-code-runner".into(),
                description: Some("Run Node.js and Python in iii-sandbox microVMs".into()),
                ..WorkerMetadata::default()
            }),
            identity: WorkerIdentityMode::Managed,
            ..InitOptions::default()
        },
    );
    let bus = Arc::new(SdkBus::new(client.clone()));
    let sandbox: Arc<dyn SandboxApi> = Arc::new(BusSandbox::new(bus.clone()));
    let manager = Manager::new(
        sandbox,
        bus.clone(),
        config,
        VmNaming::new(&owner),
        url.clone(),
    );
    functions::publish_all(bus.as_ref(), &manager);
    functions::publish_ui(bus.as_ref());
    let settings = Settings::new(bus.clone());
    settings.publish();
    if let Err(e) = client.wait_until_registered(Duration::from_secs(30)).await {
        tracing::warn!(error = %e, %url, "not registered with the engine yet; the SDK keeps retrying");
    }
    tracing::info!(%url, "sandbox-code-runner serving run, register_function, teardown");

    match manager.sweep_orphans().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            stopped = n,
            "stopped VMs a previous process of this owner left"
        ),
        Err(SandboxError::NotInstalled) => tracing::warn!(
            "!!! iii-sandbox is not connected: every call will fail until it is. {INSTALL_HINT}"
        ),
        Err(e) => tracing::warn!(error = %e, "could not list sandboxes for the orphan sweep"),
    }

    manager.start_pool();
    settings.boot().await;

    wait_for_signal().await;
    tracing::info!("shutting down: stopping every VM this worker owns");
    manager.shutdown().await;
    client.shutdown_async().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
