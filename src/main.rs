//! The `sandbox-code-runner` binary: connect, publish, serve, and on SIGTERM
//! stop every VM this process owns.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use iii_sdk::runtime::WorkerMetadata;
use iii_sdk::{register_worker, InitOptions, WorkerIdentityMode};

use sandbox_code_runner::bus::SdkBus;
use sandbox_code_runner::config::Config;
use sandbox_code_runner::functions;
use sandbox_code_runner::guest_listener::{
    reachable_from_guests, ListenerLayout, DEFAULT_MAIN_HOST,
};
use sandbox_code_runner::runtime::{Manager, VmNaming};
use sandbox_code_runner::sandbox::{BusSandbox, SandboxApi, INSTALL_HINT};
use sandbox_code_runner::settings::Settings;

/// Run Node.js and Python in iii-sandbox microVMs, as an iii worker.
#[derive(Parser, Debug)]
#[command(name = "sandbox-code-runner", version)]
struct Args {
    /// iii engine URL.
    #[arg(long, env = "III_URL", default_value = "ws://127.0.0.1:49134")]
    url: String,
    /// YAML config file. Its keys are the README's Configuration table (a
    /// test keeps the two equal); an unknown key stops the worker at boot.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The engine's guest listener as guests reach it (overrides the
    /// config's `guest_url`); see `guest-listener-config`.
    #[arg(long, env = "III_GUEST_URL")]
    guest_url: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the iii engine config for a guest listener: guests get the bus
    /// through it, gated by this worker's auth function, and the main
    /// listener moves to a host-only address the sandbox gateway cannot reach.
    GuestListenerConfig {
        /// The guest listener's port (on 127.0.0.1).
        #[arg(long)]
        port: u16,
        /// The main listener's host-only address.
        #[arg(long, default_value_t = DEFAULT_MAIN_HOST)]
        main_host: std::net::Ipv4Addr,
        /// The main listener's port.
        #[arg(long, default_value_t = 49134)]
        main_port: u16,
    },
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
    if let Some(Command::GuestListenerConfig {
        port,
        main_host,
        main_port,
    }) = args.command
    {
        print!(
            "{}",
            ListenerLayout {
                guest_port: port,
                main_host,
                main_port,
            }
            .render()
        );
        return ExitCode::SUCCESS;
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let mut config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(url) = args.guest_url.filter(|u| !u.is_empty()) {
        if let Err(e) = sandbox_code_runner::config::check_guest_url(&url) {
            eprintln!("error: --guest-url: {e}");
            return ExitCode::from(2);
        }
        config.guest_url = Some(url);
    }
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

/// The boot warnings about what guest code can reach.
fn warn_guest_reach(url: &str, config: &Config) {
    match &config.guest_url {
        None => tracing::warn!(
            "!!! no guest listener (guest_url) is configured: guest code connects to the main listener and can call every sandbox::* function, i.e. read, run in and stop every tenant's VM. Run `sandbox-code-runner guest-listener-config --port 49135` for the engine config that closes this."
        ),
        Some(guest) => tracing::info!(guest_url = %guest, "guests connect through the guest listener"),
    }
    if reachable_from_guests(url) == Some(true) {
        tracing::warn!(
            %url,
            "!!! the engine URL this worker uses is reachable from guest code (the sandbox gateway forwards to the host's 127.0.0.1 on any port): a guest can open its own WebSocket there and skip the guest listener. Bind the main listener to a host-only address such as 127.0.0.2 (see `sandbox-code-runner guest-listener-config`)."
        );
    }
}

async fn serve(url: String, config: Config) -> ExitCode {
    warn_guest_reach(&url, &config);
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
    sandbox_code_runner::nodelay::keep_off(&url);
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
    sandbox_code_runner::events::provide_over_sdk(&client, manager.events().clone());
    let settings = Settings::new(bus.clone());
    functions::settings::publish(bus.as_ref(), &settings);

    // SIGTERM is honoured from here on, whatever the boot is waiting for.
    let signal = stop_signal::stop_requested();
    tokio::pin!(signal);
    tokio::select! {
        _ = &mut signal => {}
        _ = boot(&client, &manager, &settings, &url) => signal.await,
    }

    // Whatever the bus does now, the process is gone within STOP_DEADLINE.
    std::thread::spawn(|| {
        std::thread::sleep(STOP_DEADLINE);
        eprintln!("shutdown did not finish within {STOP_DEADLINE:?}; exiting; VMs left are stopped by the next boot's orphan sweep");
        std::process::exit(EXIT_UNCLEAN);
    });
    tracing::info!("shutting down: stopping every VM this worker owns");
    let report = manager.shutdown_within(STOP_BUDGET).await;
    let _ = tokio::time::timeout(DISCONNECT_BUDGET, client.shutdown_async()).await;
    if report.is_clean() {
        tracing::info!(stopped = report.stopped, "shutdown clean");
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_UNCLEAN as u8)
    }
}

/// SIGTERM to exit, at most (a supervisor's stop must be bounded).
const STOP_DEADLINE: Duration = Duration::from_millis(4700);
/// Total time every `sandbox::stop` of the shutdown shares.
const STOP_BUDGET: Duration = Duration::from_millis(3800);
/// Time to say goodbye to the engine.
const DISCONNECT_BUDGET: Duration = Duration::from_millis(400);
/// Exit status of a shutdown that left VMs running (for the next boot's
/// orphan sweep); 0 means every owned VM was stopped.
const EXIT_UNCLEAN: i32 = 3;

/// Registration, the orphan sweep, the pool, live settings; then serves
/// until the process is told to stop.
async fn boot(client: &iii_sdk::IIIClient, manager: &Manager, settings: &Arc<Settings>, url: &str) {
    if let Err(e) = client.wait_until_registered(Duration::from_secs(30)).await {
        tracing::warn!(error = %e, %url, "not registered with the engine yet; the SDK keeps retrying");
    }
    tracing::info!(%url, "sandbox-code-runner serving run, register_function, teardown, list_runtimes, watch");

    match manager.sweep_orphans().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            stopped = n,
            "stopped VMs a previous process of this owner left"
        ),
        Err(e) if e.is_not_installed() => tracing::warn!(
            "!!! iii-sandbox is not connected: every call will fail until it is. {INSTALL_HINT}"
        ),
        Err(e) => tracing::warn!(error = %e, "could not list sandboxes for the orphan sweep"),
    }

    manager.start_pool();
    settings.boot().await;
    std::future::pending::<()>().await;
}
