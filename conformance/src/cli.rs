//! Command-line entry points: `serve` (the stand-in stack), `trigger`, and
//! the conformance suite's `run` and `compat`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::standin::sandbox_double::SandboxArgs;
use crate::standin::stack::{Stack, StackOptions};

/// Conformance suite and stand-in stack for code-runner-compatible workers.
#[derive(Parser, Debug)]
#[command(name = "code-runner-conformance", version)]
pub struct Cli {
    /// Library logs on stderr: `-v` INFO, `-vv` DEBUG (`RUST_LOG` overrides).
    /// Without it only warnings show, except for `serve`, which logs INFO.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start the stand-in stack (the stand-in engine and the iii-sandbox
    /// double); print the engine URL on stdout once both are ready; run until
    /// SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Trigger a function the way `iii trigger` does: `k=v` pairs or `--json`.
    Trigger(crate::trigger::TriggerArgs),
    /// Run the conformance suite against a target.
    Run(crate::suite::cli::RunArgs),
    /// Print the field-by-field wire diff between two targets' golden schemas.
    Compat(crate::suite::cli::CompatArgs),
    /// Compare two criterion bench summaries (target/bench-summary-*.json), A then B.
    BenchCompare(BenchCompareArgs),
    /// Print a draft target profile for a live worker: what it publishes,
    /// its schemas and error envelope, and what a few cheap probe calls show
    /// (output caps, validation, limits, its guest listener); the rest at
    /// seed 000's answer.
    Profile(crate::suite::draft::ProfileArgs),
}

#[derive(clap::Args, Debug)]
pub struct BenchCompareArgs {
    /// The baseline summary.
    pub(crate) a: std::path::PathBuf,
    /// The summary compared with it.
    pub(crate) b: std::path::PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Main listener port (on `--main-host`); 0 picks a free one.
    #[arg(long, default_value_t = 49134)]
    pub(crate) port: u16,
    /// Main listener host: host-only 127.0.0.2 by default, which the
    /// sandbox gateway (like the real one) does not reach.
    #[arg(long, default_value_t = crate::standin::stack::MAIN_HOST)]
    pub(crate) main_host: std::net::Ipv4Addr,
    /// Guest listener port on 127.0.0.1 (RBAC; auth function
    /// `sandbox-code-runner::guest-auth`); 0 picks a free one.
    #[arg(long, default_value_t = 49135)]
    pub(crate) guest_port: u16,
    /// Function prefix of the worker whose `<prefix>::guest-auth` and
    /// `<prefix>::guest-register` gate the guest listener.
    #[arg(long, default_value = "sandbox-code-runner")]
    pub(crate) guest_prefix: String,
    /// Connect the daemon double to this (real) engine instead of starting
    /// the stand-in.
    #[arg(long)]
    pub(crate) engine: Option<String>,
    /// Also start the configuration-worker double, persisting one YAML file
    /// per entry in this directory.
    #[arg(long)]
    pub(crate) configuration_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
}

/// The log level a command runs with when `RUST_LOG` is unset: the suite's
/// stderr carries its progress lines and `trigger` prints an answer, so the
/// libraries (the SDK's telemetry set-up included) stay quiet unless asked.
pub fn default_log_level(command: &Command, verbose: u8) -> &'static str {
    match (command, verbose) {
        (_, 2..) => "debug",
        (_, 1) | (Command::Serve(_), _) => "info",
        _ => "warn",
    }
}

/// Logs to stderr at `RUST_LOG`, else `default`.
pub fn init_tracing_with(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub async fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Trigger(args) => crate::trigger::run(args).await,
        Command::Run(args) => crate::suite::cli::run(args).await,
        Command::Compat(args) => crate::suite::cli::compat(args),
        Command::Profile(args) => crate::suite::draft::run(args).await,
        Command::BenchCompare(args) => match crate::bench_compare::run(&args.a, &args.b) {
            Ok(table) => {
                print!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                print_error(&e);
                ExitCode::from(2)
            }
        },
    }
}

async fn serve(args: ServeArgs) -> ExitCode {
    let options = StackOptions {
        port: args.port,
        engine: args.engine,
        limits: args.sandbox.limits(),
        configuration_dir: args.configuration_dir,
        without_sandbox: false,
    };
    let layout = crate::standin::stack::ListenerLayout::served(
        &args.guest_prefix,
        args.guest_port,
        args.main_host,
    );
    let stack = match Stack::start_with_layout(options, layout).await {
        Ok(b) => b,
        Err(e) => {
            print_error(&e);
            return ExitCode::FAILURE;
        }
    };
    println!("{}", stack.url());
    if let Some(guest) = stack.guest_url() {
        tracing::info!(%guest, "guest listener (RBAC; give it to the worker as guest_url / III_GUEST_URL)");
    }
    stop_signal::stop_requested().await;
    tracing::info!("stopping: every sandbox this stand-in stack started is stopped");
    stack.shutdown().await;
    ExitCode::SUCCESS
}

/// Prints `error: <e>`, then each `source()` of the chain on its own line,
/// so a failure keeps every cause up to the terminal.
pub(crate) fn print_error(e: &dyn std::error::Error) {
    eprintln!("error: {e}");
    let mut next = e.source();
    while let Some(cause) = next {
        eprintln!("  caused by: {cause}");
        next = cause.source();
    }
}
