//! The conformance suite.
//!
//! - `case`: the case model and loading (`golden/cases/*.yaml`);
//! - `matcher`: response matchers; `vars`: placeholders and captures;
//! - `target`: targets and profiles (`golden/targets/*.yaml`);
//! - `errors`: error tables, envelopes, the closed-world check;
//! - `expectations`: known failures and stale entries;
//! - `schema`: schema snapshots, normalization, the `compat` diff;
//! - `env`: hermetic, live and engine-image environments;
//! - `runner`: one case's steps, captures and cleanup;
//! - `published`: what the target publishes against its profile, and its
//!   error envelope.
//!
//! [`run`] ties them together and returns a [`Report`].

pub mod case;
mod child;
pub mod cli;
pub mod draft;
pub(crate) mod engine_bin;
pub mod env;
pub mod errors;
mod execute;
pub mod expectations;
mod fit;
mod golden;
mod load_error;
pub use load_error::LoadError;
pub mod matcher;
pub mod published;
pub mod report;
pub mod runner;
pub mod schema;
pub mod target;
pub mod vars;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use iii_sdk::protocol::TriggerRequest;
use serde_json::{json, Value};

use crate::suite::report::{CaseReport, LevelGate, Progress, Report};
use case::{Case, Level};
use env::{Env, EnvError, WorkerCommand};
use errors::{ErrorTable, Observed, Violation};
use execute::{finalize, provisional, run_case, run_schema};
use expectations::{Expectations, Verdict};
pub use golden::{closed_world_static, load, Golden, Loaded};
use target::Target;
use vars::Vars;

/// This suite's version; a case's `since` may not be newer.
pub const SUITE_VERSION: &str = "0.1.0";
/// Id of the pseudo-case that reports the error table's closed world.
pub const CLOSED_WORLD_CASE: &str = "errors.closed-world";
/// Longest a single case may run.
const CASE_DEADLINE: Duration = Duration::from_secs(300);

/// Why a run could not happen (as opposed to cases failing).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// Golden data is missing or malformed.
    #[error("golden data: {0}")]
    Golden(String),
    /// A golden file could not be loaded; the loader's error is the source.
    #[error("golden data")]
    GoldenLoad(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The requested environment cannot exist here; nothing was run.
    #[error("skipped: {0}")]
    Unavailable(String),
    #[error("environment")]
    Environment(#[source] EnvError),
    /// A `--filter` selected nothing.
    #[error("--filter {0} matches no case (case ids look like `run.one-shot.print`; globs take * and ?)")]
    NoMatch(String),
}

impl SuiteError {
    /// A golden loader failed; its error stays the source.
    pub(crate) fn golden_load(e: impl std::error::Error + Send + Sync + 'static) -> SuiteError {
        SuiteError::GoldenLoad(Box::new(e))
    }
}

impl From<EnvError> for SuiteError {
    fn from(e: EnvError) -> SuiteError {
        match e {
            EnvError::Unavailable(m) => SuiteError::Unavailable(m),
            e => SuiteError::Environment(e),
        }
    }
}

/// Where the suite runs.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The stand-in stack in-process; the worker spawned (default: the workspace's,
    /// rebuilt first when the sources changed).
    Hermetic { worker_cmd: Option<WorkerCommand> },
    /// A running engine where the target is already connected.
    Live { url: String },
    /// A real engine from a container image; the worker spawned.
    EngineImage {
        image: String,
        port: u16,
        worker_cmd: Option<WorkerCommand>,
    },
    /// A real engine binary as every environment's engine (private ones
    /// included), the daemon double attached, the worker spawned.
    EngineBin {
        bin: PathBuf,
        worker_cmd: Option<WorkerCommand>,
    },
}

impl Mode {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Mode::Hermetic { .. } => "hermetic",
            Mode::Live { .. } => "live",
            Mode::EngineImage { .. } => "engine-image",
            Mode::EngineBin { .. } => "engine-bin",
        }
    }
}

/// A run's options.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    pub golden: Option<PathBuf>,
    pub(crate) target: String,
    /// Function prefix override (a fork under another name).
    pub prefix: Option<String>,
    pub(crate) mode: Mode,
    /// Globs over case ids; empty = every case.
    pub filters: Vec<String>,
    pub jobs: usize,
    /// Expectations file override.
    pub expectations: Option<PathBuf>,
    /// Write the live schemas as the target's golden ones instead of
    /// comparing.
    pub(crate) bless_schemas: bool,
    /// Per-case lines on stderr.
    pub progress: bool,
    /// Which levels' failures fail the run.
    pub(crate) level: LevelGate,
}

impl SuiteOptions {
    pub fn new(target: &str, mode: Mode) -> SuiteOptions {
        SuiteOptions {
            golden: None,
            target: target.to_string(),
            prefix: None,
            mode,
            filters: Vec::new(),
            jobs: 4,
            expectations: None,
            bless_schemas: false,
            progress: true,
            level: LevelGate::All,
        }
    }
}

/// Whether a case id is selected by the filters.
pub(crate) fn selected(filters: &[String], id: &str) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .flat_map(|f| f.split(','))
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .any(|f| case::glob_match(f, id))
}

enum Job<'a> {
    Case(&'a Case),
    Schema(String),
}

impl Job<'_> {
    fn id(&self) -> String {
        match self {
            Job::Case(c) => c.id.clone(),
            Job::Schema(f) => format!("schema.{f}"),
        }
    }
}

/// What one job yields before expectations.
struct JobResult {
    id: String,
    level: Option<Level>,
    duration: Duration,
    failure: Option<String>,
    skipped: Option<String>,
    envelopes: BTreeMap<String, u32>,
    notes: Vec<String>,
    file: Option<String>,
    schema: Option<(String, Value)>,
}

/// A unique namespace for one case run: `cf-<8 hex>`.
fn fresh_namespace() -> String {
    format!("cf-{:08x}", rand::random::<u32>())
}

struct Context<'a> {
    loaded: &'a Loaded,
    prefix: String,
    env: &'a Env,
    worker_cmd: Option<WorkerCommand>,
    /// The engine binary private environments run on (`--engine-bin`).
    engine_bin: Option<PathBuf>,
    private_ok: Result<(), String>,
    /// The guest listener the target's profile lays out, which private
    /// environments of cases that need it get too.
    guest: Option<crate::standin::stack::GuestGate>,
    functions: Vec<String>,
    published: published::Published,
    /// How the profile fits the worker (diagnosed once, at the start).
    fit: fit::Fit,
    /// Why the stand-ins cannot model a sandbox network here, if they cannot.
    stand_in_gap: Option<&'static str>,
    observed: Mutex<Vec<(String, Observed)>>,
    bless: bool,
}

/// What the target publishes under `prefix` against its profile, and every
/// id the engine lists there (internal ones included).
async fn observe_published(
    env: &Env,
    prefix: &str,
    target: &Target,
) -> (published::Published, BTreeSet<String>) {
    let functions: Vec<String> = target
        .functions
        .iter()
        .map(|f| format!("{prefix}::{f}"))
        .collect();
    let present = env::functions_present(&env.client, &functions)
        .await
        .unwrap_or_default();
    let mut seen: BTreeSet<String> = present.into_iter().collect();
    if let Some(listed) = published::listed_under(&env.client, prefix).await {
        seen.extend(listed);
    }
    (
        published::Published::compare(prefix, &target.functions, &seen),
        seen,
    )
}

/// Runs the suite.
pub async fn run(opts: SuiteOptions) -> Result<Report, SuiteError> {
    let golden = Golden::locate(opts.golden.clone())?;
    let loaded = load(&golden, &opts.target, opts.expectations.as_deref())?;
    let prefix = opts
        .prefix
        .clone()
        .unwrap_or_else(|| loaded.target.prefix.clone());
    let functions: Vec<String> = loaded
        .target
        .functions
        .iter()
        .map(|f| format!("{prefix}::{f}"))
        .collect();

    // A filter that selects nothing is a mistake, not a green run.
    for f in opts
        .filters
        .iter()
        .flat_map(|f| f.split(','))
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        let hits = loaded.cases.iter().any(|c| case::glob_match(f, &c.id))
            || loaded
                .target
                .functions
                .iter()
                .any(|s| case::glob_match(f, &format!("schema.{s}")))
            || case::glob_match(f, CLOSED_WORLD_CASE);
        if !hits {
            return Err(SuiteError::NoMatch(format!("`{f}`")));
        }
    }
    // The engine-image gate comes first: without Docker nothing else matters.
    if let Mode::EngineImage { .. } = &opts.mode {
        env::docker_answers().map_err(SuiteError::Unavailable)?;
    }
    // Building the default worker is not part of the run's wall time.
    let default_cmd = match &opts.mode {
        Mode::Hermetic { worker_cmd: None }
        | Mode::EngineBin {
            worker_cmd: None, ..
        }
        | Mode::EngineImage {
            worker_cmd: None, ..
        } => Some(WorkerCommand::beside_exe(env::BuildPolicy::Always)?),
        _ => None,
    };
    let started = Instant::now();
    let engine_bin = match &opts.mode {
        Mode::EngineBin { bin, .. } => Some(bin.clone()),
        _ => None,
    };
    let wanted = fit::wanted_layout(&loaded.target, &prefix);
    let (mut env, mut worker_cmd, mut private_ok) =
        fit::start_env(&opts.mode, default_cmd.as_ref(), &functions, &wanted).await?;

    // What the target publishes against its profile, and its envelope.
    let (mut published, listed) = observe_published(&env, &prefix, &loaded.target).await;
    // A profile that does not fit its worker is diagnosed once, here; where
    // the mode allows, the environment is laid out again as the worker can
    // use it, so the rest of the run does not time out on it.
    let fit = fit::Fit::check(&loaded.target, &prefix, &listed);
    let layout = fit.layout(&wanted, &prefix);
    if !fit.misfits.is_empty() && fit::relayable(&opts.mode) {
        env.shutdown().await;
        (env, worker_cmd, private_ok) =
            fit::start_env(&opts.mode, default_cmd.as_ref(), &functions, &layout).await?;
        (published, _) = observe_published(&env, &prefix, &loaded.target).await;
    }
    let probe = published::probe_envelope(&env.client, &prefix, &published).await;
    if opts.progress {
        eprint!("{}", published.render(&prefix, &probe));
        eprint!("{}", fit.render());
    }
    // Private environments wait for what the target actually publishes.
    let functions: Vec<String> = published
        .present
        .iter()
        .map(|f| format!("{prefix}::{f}"))
        .collect();
    // What the stand-ins cannot model on this host (live mode runs on the
    // real daemon).
    let stand_in_gap = match &opts.mode {
        Mode::Live { .. } => None,
        _ => crate::standin::sandbox_double::network::unmodelled(),
    };

    let ctx = Context {
        loaded: &loaded,
        prefix: prefix.clone(),
        env: &env,
        worker_cmd,
        engine_bin,
        private_ok,
        guest: layout.guest.clone(),
        functions,
        published,
        fit,
        stand_in_gap,
        observed: Mutex::new(Vec::new()),
        bless: opts.bless_schemas,
    };

    let mut jobs: Vec<Job> = loaded
        .cases
        .iter()
        .filter(|c| selected(&opts.filters, &c.id))
        .map(Job::Case)
        .collect();
    for f in &loaded.target.functions {
        let job = Job::Schema(f.clone());
        if selected(&opts.filters, &job.id()) {
            jobs.push(job);
        }
    }
    // Slow cases first, so they overlap everything else.
    jobs.sort_by_key(|j| match j {
        Job::Case(c) => (!c.slow, c.id.clone()),
        Job::Schema(_) => (true, j.id()),
    });
    let closed_world_selected = selected(&opts.filters, CLOSED_WORLD_CASE);
    let total = jobs.len() + usize::from(closed_world_selected);
    let progress = Progress::new(total, opts.progress);

    let results: Vec<JobResult> = futures_util::stream::iter(jobs)
        .map(|job| {
            let ctx = &ctx;
            let progress = &progress;
            async move {
                let r = match job {
                    Job::Case(c) => run_case(ctx, c).await,
                    Job::Schema(f) => run_schema(ctx, &f).await,
                };
                progress.case_done(&provisional(&r, &ctx.loaded.expectations));
                r
            }
        })
        .buffer_unordered(opts.jobs.max(1))
        .collect()
        .await;

    let observed = std::mem::take(&mut *ctx.observed.lock().unwrap_or_else(|p| p.into_inner()));
    let mut schemas = BTreeMap::new();
    let mut reports: Vec<CaseReport> = Vec::new();
    let mut envelopes: BTreeMap<String, u32> = BTreeMap::new();
    for r in results {
        for (k, v) in &r.envelopes {
            *envelopes.entry(k.clone()).or_default() += v;
        }
        if let Some((f, s)) = &r.schema {
            schemas.insert(f.clone(), s.clone());
        }
        reports.push(finalize(r, &loaded.expectations));
    }

    let mut closed_world = closed_world_static(&loaded);
    closed_world.extend(errors::closed_world_observed(&loaded.table, &observed));
    // Violations fail the run even when the filter left the case out.
    if closed_world_selected || !closed_world.is_empty() {
        let r = JobResult {
            id: CLOSED_WORLD_CASE.to_string(),
            level: Some(Level::Recommended),
            duration: Duration::ZERO,
            failure: (!closed_world.is_empty()).then(|| {
                closed_world
                    .iter()
                    .map(|v| format!("{}: {}", v.code, v.problem))
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            skipped: None,
            envelopes: BTreeMap::new(),
            notes: Vec::new(),
            file: Some(
                golden
                    .errors()
                    .join(format!("{}.json", loaded.target.name))
                    .display()
                    .to_string(),
            ),
            schema: None,
        };
        let report = finalize(r, &loaded.expectations);
        progress.case_done(&report);
        reports.push(report);
    }

    // Expectation entries that name no case at all are stale.
    let mut known: Vec<String> = loaded.cases.iter().map(|c| c.id.clone()).collect();
    known.extend(
        loaded
            .target
            .functions
            .iter()
            .map(|f| format!("schema.{f}")),
    );
    known.push(CLOSED_WORLD_CASE.to_string());
    let known_refs: Vec<&str> = known.iter().map(String::as_str).collect();
    for e in loaded.expectations.unknown_entries(&known_refs) {
        reports.push(CaseReport {
            id: format!("expectations.{}", e.case),
            level: None,
            verdict: Verdict::Stale,
            duration_ms: 0,
            message: Some(format!(
                "the expectations list `{}` ({}), but no such case exists: remove the entry",
                e.case, e.reason
            )),
            reason: None,
            envelopes: BTreeMap::new(),
            notes: Vec::new(),
            file: None,
        });
    }

    reports.sort_by(|a, b| a.id.cmp(&b.id));
    env.shutdown().await;
    let summary = Report::summarize(&reports, opts.level);
    let by_level = Report::summarize_by_level(&reports, opts.level);
    Ok(Report {
        suite_version: SUITE_VERSION.to_string(),
        target: loaded.target.name.clone(),
        prefix,
        mode: opts.mode.label().to_string(),
        level: opts.level,
        wall_ms: started.elapsed().as_millis() as u64,
        summary,
        by_level,
        envelopes,
        closed_world,
        cases: reports,
        schemas,
    })
}
