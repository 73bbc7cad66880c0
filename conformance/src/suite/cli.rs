//! `run` and `compat`: the suite's subcommands.

use std::path::PathBuf;
use std::process::ExitCode;

use super::env::{WorkerCommand, DEFAULT_ENGINE_PORT};
use super::{schema, Golden, Mode, SuiteError, SuiteOptions};
use crate::suite::report::LevelGate;

/// `code-runner-conformance run`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(
    clap::ArgGroup::new("mode")
        .required(true)
        .args(["hermetic", "engine", "engine_image", "engine_bin"])
))]
pub struct RunArgs {
    /// Start the stand-in stack in-process and spawn the worker (`--worker-cmd`).
    #[arg(long)]
    pub(crate) hermetic: bool,
    /// A live engine (`ws://host:port`) where the target is already connected.
    #[arg(long, value_name = "URL")]
    pub(crate) engine: Option<String>,
    /// Start a real iii engine from this container image (testcontainers;
    /// skipped, with the reason printed, when no Docker daemon answers).
    #[arg(long, value_name = "IMAGE")]
    pub(crate) engine_image: Option<String>,
    /// Like --hermetic, but the engine of every environment (private ones
    /// included) is this real iii binary, started with a minimal config on a
    /// free loopback port, the sandbox double attached.
    #[arg(long, value_name = "PATH")]
    pub(crate) engine_bin: Option<PathBuf>,
    /// The engine's port inside the container.
    #[arg(long, default_value_t = DEFAULT_ENGINE_PORT)]
    pub(crate) engine_image_port: u16,
    /// The worker to spawn (hermetic, engine-bin and engine-image modes); `--url` (and
    /// `--config` for cases that configure it) are appended. Default: this
    /// workspace's `target/<profile>/sandbox-code-runner`, next to this binary.
    #[arg(long, value_name = "COMMAND")]
    pub(crate) worker_cmd: Option<String>,
    /// Target profile: `golden/targets/<name>.yaml`.
    #[arg(long, default_value = "sandbox-code-runner")]
    pub(crate) target: String,
    /// Function prefix, when it differs from the target's (a fork).
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// Only cases whose id matches a glob (`*`, `?`); repeatable or comma-separated.
    #[arg(long, value_name = "GLOB")]
    pub(crate) filter: Vec<String>,
    /// Cases run concurrently.
    #[arg(long, short = 'j', default_value_t = 4)]
    pub(crate) jobs: usize,
    /// Write the JSON report here.
    #[arg(long, value_name = "PATH")]
    pub(crate) report_json: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "PATH")]
    pub(crate) junit: Option<PathBuf>,
    /// The golden directory (default: this workspace's `golden/`).
    #[arg(long, value_name = "DIR", env = "CODE_RUNNER_CONFORMANCE_GOLDEN")]
    pub(crate) golden: Option<PathBuf>,
    /// Expectations file (default: `golden/expectations/<target>.yaml`).
    #[arg(long, value_name = "PATH")]
    pub(crate) expectations: Option<PathBuf>,
    /// Write the live schemas as `golden/schemas/<target>/*.json` instead of
    /// comparing (review the diff before committing).
    #[arg(long)]
    pub(crate) bless_schemas: bool,
    /// No per-case progress lines.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Which levels' failures fail the run: `contract`, `recommended`
    /// (contract and recommended), or `all`. Every result is reported.
    #[arg(long, value_enum, default_value_t = LevelGate::All)]
    pub(crate) level: LevelGate,
}

impl RunArgs {
    /// The options these arguments describe.
    pub(crate) fn options(&self) -> Result<SuiteOptions, SuiteError> {
        let worker_cmd = self
            .worker_cmd
            .as_deref()
            .map(WorkerCommand::parse)
            .transpose()?;
        let mode = if let Some(url) = &self.engine {
            Mode::Live { url: url.clone() }
        } else if let Some(bin) = &self.engine_bin {
            Mode::EngineBin {
                bin: bin.clone(),
                worker_cmd,
            }
        } else if let Some(image) = &self.engine_image {
            Mode::EngineImage {
                image: image.clone(),
                port: self.engine_image_port,
                worker_cmd,
            }
        } else {
            Mode::Hermetic { worker_cmd }
        };
        Ok(SuiteOptions {
            golden: self.golden.clone(),
            target: self.target.clone(),
            prefix: self.prefix.clone(),
            mode,
            filters: self.filter.clone(),
            jobs: self.jobs,
            expectations: self.expectations.clone(),
            bless_schemas: self.bless_schemas,
            progress: !self.quiet,
            level: self.level,
        })
    }
}

/// Runs the suite; the exit code is non-zero on any unexpected result.
pub(crate) async fn run(args: RunArgs) -> ExitCode {
    let options = match args.options() {
        Ok(o) => o,
        Err(e) => {
            crate::cli::print_error(&e);
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "code-runner-conformance {}: target {} ({} mode, {} jobs, --level {})",
        super::SUITE_VERSION,
        options.target,
        options.mode.label(),
        options.jobs.max(1),
        options.level.as_str()
    );
    let report = match super::run(options).await {
        Ok(r) => r,
        Err(SuiteError::Unavailable(why)) => {
            eprintln!("skipped: {why}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            crate::cli::print_error(&e);
            return ExitCode::from(2);
        }
    };
    eprint!("{}", report.summary_text());
    let mut ok = report.ok();
    if let Some(p) = &args.report_json {
        if let Err(e) = report.write_json(p) {
            eprintln!("error: cannot write {}: {e}", p.display());
            ok = false;
        }
    }
    if let Some(p) = &args.junit {
        if let Err(e) = report.write_junit(p) {
            eprintln!("error: cannot write {}: {e}", p.display());
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `code-runner-conformance compat <a> <b>`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompatArgs {
    /// The target a caller was written against.
    pub(crate) target_a: String,
    /// The target it would move to.
    pub(crate) target_b: String,
    /// The golden directory (default: this workspace's `golden/`).
    #[arg(long, value_name = "DIR", env = "CODE_RUNNER_CONFORMANCE_GOLDEN")]
    pub(crate) golden: Option<PathBuf>,
    /// Print the diff as JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The wire diff between two targets' golden schemas.
pub fn compat_report(
    golden: Option<PathBuf>,
    a: &str,
    b: &str,
) -> Result<schema::CompatReport, SuiteError> {
    let golden = Golden::locate(golden)?;
    let load = |t: &str| schema::load_target(&golden.schemas(), t).map_err(SuiteError::golden_load);
    let (sa, sb) = (load(a)?, load(b)?);
    Ok(schema::compat(a, &sa, b, &sb))
}

pub(crate) fn compat(args: CompatArgs) -> ExitCode {
    match compat_report(args.golden.clone(), &args.target_a, &args.target_b) {
        Ok(r) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).unwrap_or_else(|e| e.to_string())
                );
            } else {
                print!("{}", r.render());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::cli::print_error(&e);
            ExitCode::from(2)
        }
    }
}
