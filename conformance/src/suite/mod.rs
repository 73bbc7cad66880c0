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
pub mod cli;
pub mod draft;
pub mod engine_bin;
pub mod env;
pub mod errors;
pub mod expectations;
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
use expectations::{Expectations, Verdict};
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
    pub fn golden_load(e: impl std::error::Error + Send + Sync + 'static) -> SuiteError {
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

/// The golden data directory and its layout.
#[derive(Debug, Clone)]
pub struct Golden {
    pub root: PathBuf,
}

impl Golden {
    /// `explicit`, else `$CODE_RUNNER_CONFORMANCE_GOLDEN`, else this
    /// workspace's `golden/`, else `./golden`.
    pub fn locate(explicit: Option<PathBuf>) -> Result<Golden, SuiteError> {
        let candidates: Vec<PathBuf> = explicit
            .into_iter()
            .chain(std::env::var_os("CODE_RUNNER_CONFORMANCE_GOLDEN").map(PathBuf::from))
            .chain([
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden"),
                PathBuf::from("golden"),
            ])
            .collect();
        for c in &candidates {
            if c.join("cases").is_dir() {
                return Ok(Golden {
                    root: c.canonicalize().unwrap_or_else(|_| c.clone()),
                });
            }
        }
        Err(SuiteError::Golden(format!(
            "no golden directory (with cases/) among {}",
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    pub fn cases(&self) -> PathBuf {
        self.root.join("cases")
    }
    pub fn targets(&self) -> PathBuf {
        self.root.join("targets")
    }
    pub fn errors(&self) -> PathBuf {
        self.root.join("errors")
    }
    pub fn schemas(&self) -> PathBuf {
        self.root.join("schemas")
    }
    pub fn expectations(&self, target: &str) -> PathBuf {
        self.root
            .join("expectations")
            .join(format!("{target}.yaml"))
    }
}

/// Everything loaded for one target.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub golden: Golden,
    pub target: Target,
    pub cases: Vec<Case>,
    pub table: ErrorTable,
    pub expectations: Expectations,
}

/// Loads and cross-checks the golden data for `target`.
pub fn load(
    golden: &Golden,
    target: &str,
    expectations: Option<&Path>,
) -> Result<Loaded, SuiteError> {
    let g = |e: String| SuiteError::Golden(e);
    let all = Target::load_all(&golden.targets()).map_err(SuiteError::golden_load)?;
    let target = Target::load(&golden.targets(), target).map_err(SuiteError::golden_load)?;
    let cases =
        case::load_cases(&golden.cases(), SUITE_VERSION).map_err(SuiteError::golden_load)?;
    let known = target::known_features(&all);
    for c in &cases {
        for r in &c.requires {
            let f = target::requirement_feature(r);
            if !known.contains(f) {
                return Err(g(format!(
                    "{}: requires unknown feature `{f}` (no target profile declares it)",
                    c.file.display()
                )));
            }
        }
    }
    let table =
        ErrorTable::load(&golden.errors(), &target.name).map_err(SuiteError::golden_load)?;
    let exp_path = expectations
        .map(Path::to_path_buf)
        .unwrap_or_else(|| golden.expectations(&target.name));
    let expectations = Expectations::load(&exp_path).map_err(SuiteError::golden_load)?;
    Ok(Loaded {
        golden: golden.clone(),
        target,
        cases,
        table,
        expectations,
    })
}

/// Static closed-world findings of a target: its table against the cases
/// whose requirements its profile meets.
pub fn closed_world_static(loaded: &Loaded) -> Vec<Violation> {
    let applicable: Vec<(String, BTreeSet<String>)> = loaded
        .cases
        .iter()
        .filter(|c| loaded.target.unmet(&c.requires).is_none())
        .map(|c| (c.id.clone(), c.expected_codes()))
        .collect();
    errors::closed_world_static(&loaded.table, &applicable)
}

/// Where the suite runs.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The bench in-process; the worker spawned (default: the workspace's,
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
    pub fn label(&self) -> &'static str {
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
    pub target: String,
    /// Function prefix override (a fork under another name).
    pub prefix: Option<String>,
    pub mode: Mode,
    /// Globs over case ids; empty = every case.
    pub filters: Vec<String>,
    pub jobs: usize,
    /// Expectations file override.
    pub expectations: Option<PathBuf>,
    /// Write the live schemas as the target's golden ones instead of
    /// comparing.
    pub bless_schemas: bool,
    /// Per-case lines on stderr.
    pub progress: bool,
    /// Which levels' failures fail the run.
    pub level: LevelGate,
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
pub fn selected(filters: &[String], id: &str) -> bool {
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
    functions: Vec<String>,
    published: published::Published,
    observed: Mutex<Vec<(String, Observed)>>,
    bless: bool,
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
    // A worker that gates its guests gets the layout its operator would
    // run: main listener host-only, guests on an RBAC listener. Any other
    // worker gets the engine's default, one listener its guests can reach.
    let layout = if loaded.target.check("guest_listener").is_ok() {
        crate::standin::stack::ListenerLayout::guarded(&prefix, 0)
    } else {
        crate::standin::stack::ListenerLayout::open()
    };
    let (env, worker_cmd, private_ok) = match &opts.mode {
        Mode::EngineBin { bin, worker_cmd } => {
            let cmd = worker_cmd.clone().or(default_cmd).ok_or_else(|| {
                SuiteError::Environment(EnvError::Failed("no worker command".into()))
            })?;
            (
                Env::engine_bin(bin, &cmd, functions.clone(), layout.guest.as_ref()).await?,
                Some(cmd),
                Ok(()),
            )
        }
        Mode::Hermetic { worker_cmd } => {
            let cmd = worker_cmd.clone().or(default_cmd).ok_or_else(|| {
                SuiteError::Environment(EnvError::Failed("no worker command".into()))
            })?;
            (
                Env::hermetic(&cmd, functions.clone(), layout.clone()).await?,
                Some(cmd),
                Ok(()),
            )
        }
        Mode::Live { url } => (
            Env::live(url, functions.clone()).await?,
            None,
            Err("needs a private environment (its own engine, daemon and worker process); live mode cannot provide one".to_string()),
        ),
        Mode::EngineImage {
            image,
            port,
            worker_cmd,
        } => {
            let cmd = worker_cmd.clone().or(default_cmd).ok_or_else(|| {
                SuiteError::Environment(EnvError::Failed("no worker command".into()))
            })?;
            (
                Env::engine_image(image, *port, &cmd, functions.clone()).await?,
                None,
                Err("needs a private environment; those run on the stand-in engine (use --hermetic)".to_string()),
            )
        }
    };

    // What the target publishes against its profile, and its envelope.
    let present = env::functions_present(&env.client, &functions)
        .await
        .unwrap_or_default();
    let mut seen: BTreeSet<String> = present.into_iter().collect();
    if let Some(listed) = published::listed_under(&env.client, &prefix).await {
        seen.extend(listed);
    }
    let published = published::Published::compare(&prefix, &loaded.target.functions, &seen);
    let probe = published::probe_envelope(&env.client, &prefix, &published).await;
    if opts.progress {
        eprint!("{}", published.render(&prefix, &probe));
    }
    // Private environments wait for what the target actually publishes.
    let functions: Vec<String> = published
        .present
        .iter()
        .map(|f| format!("{prefix}::{f}"))
        .collect();

    let ctx = Context {
        loaded: &loaded,
        prefix: prefix.clone(),
        env: &env,
        worker_cmd,
        engine_bin,
        private_ok,
        functions,
        published,
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

fn provisional(r: &JobResult, exp: &Expectations) -> CaseReport {
    finalize(
        JobResult {
            id: r.id.clone(),
            level: r.level,
            duration: r.duration,
            failure: r.failure.clone(),
            skipped: r.skipped.clone(),
            envelopes: BTreeMap::new(),
            notes: Vec::new(),
            file: None,
            schema: None,
        },
        exp,
    )
}

fn finalize(r: JobResult, exp: &Expectations) -> CaseReport {
    let (verdict, message, reason) = if let Some(skip) = r.skipped {
        (Verdict::Skip, None, Some(skip))
    } else {
        let passed = r.failure.is_none();
        let verdict = exp.verdict(&r.id, passed);
        let reason = exp.reason(&r.id).map(str::to_string);
        let message = match verdict {
            Verdict::Stale => Some(format!(
                "listed as a known failure ({}) but passed: the entry is stale, remove it",
                reason.as_deref().unwrap_or("")
            )),
            _ => r.failure,
        };
        (verdict, message, reason)
    };
    CaseReport {
        id: r.id,
        level: r.level,
        verdict,
        duration_ms: r.duration.as_millis() as u64,
        message,
        reason,
        envelopes: r.envelopes,
        notes: r.notes,
        file: r.file,
    }
}

async fn run_case(ctx: &Context<'_>, case: &Case) -> JobResult {
    let started = Instant::now();
    let mut result = JobResult {
        id: case.id.clone(),
        level: Some(case.level),
        duration: Duration::ZERO,
        failure: None,
        skipped: None,
        envelopes: BTreeMap::new(),
        notes: Vec::new(),
        file: Some(case.file.display().to_string()),
        schema: None,
    };
    if case.level == Level::Profile {
        if let Some(why) = ctx.loaded.target.undeclared(&case.requires) {
            result.skipped = Some(why);
            return result;
        }
    }
    if let Some(why) = ctx.loaded.target.unmet(&case.requires) {
        result.skipped = Some(why);
        return result;
    }
    // A function the profile lists but the target does not publish fails
    // the cases that need it, and only those.
    let needed = published::triggered(&case.all_steps());
    let missing: Vec<&String> = needed.iter().filter(|f| !ctx.published.has(f)).collect();
    if !missing.is_empty() {
        result.failure = Some(format!(
            "needs {}, which the target does not publish (its profile lists {})",
            missing
                .iter()
                .map(|f| format!("{}::{f}", ctx.prefix))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        ));
        return result;
    }
    let private = match &case.environment {
        None => None,
        Some(spec) => {
            if let Err(why) = &ctx.private_ok {
                result.skipped = Some(why.clone());
                return result;
            }
            let Some(cmd) = &ctx.worker_cmd else {
                result.skipped = Some("no worker command for a private environment".into());
                return result;
            };
            match Env::private(spec, cmd, ctx.functions.clone(), ctx.engine_bin.as_deref()).await {
                Ok(e) => Some(e),
                Err(EnvError::Unavailable(why)) => {
                    result.skipped = Some(why);
                    return result;
                }
                Err(e) => {
                    result.failure = Some(format!("private environment: {}", e.chain()));
                    result.duration = started.elapsed();
                    return result;
                }
            }
        }
    };
    let env = private.as_ref().unwrap_or(ctx.env);
    let mut vars = Vars::new();
    vars.set("ns", json!(fresh_namespace()));
    vars.set("uuid", json!(uuid::Uuid::new_v4().to_string()));
    vars.set("prefix", json!(ctx.prefix));
    vars.set("case", json!(case.id));
    vars.set("engine_url", json!(env.url));
    let run = runner::CaseRun::new(&case.id, &ctx.prefix, env, vars);
    let raw = match tokio::time::timeout(CASE_DEADLINE, run.run(case)).await {
        Ok(raw) => raw,
        Err(_) => runner::RawOutcome {
            failure: Some(format!("the case did not finish within {CASE_DEADLINE:?}")),
            ..runner::RawOutcome::default()
        },
    };
    if let Some(e) = private {
        e.shutdown().await;
    }
    ctx.observed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(raw.observed);
    result.failure = raw.failure;
    result.notes = raw.notes;
    result.envelopes = raw
        .envelopes
        .into_iter()
        .map(|(k, v)| (k.as_str().to_string(), v))
        .collect();
    result.duration = started.elapsed();
    result
}

async fn run_schema(ctx: &Context<'_>, function: &str) -> JobResult {
    let started = Instant::now();
    let path = schema::golden_path(
        &ctx.loaded.golden.schemas(),
        &ctx.loaded.target.name,
        function,
    );
    let mut result = JobResult {
        id: format!("schema.{function}"),
        level: Some(Level::Recommended),
        duration: Duration::ZERO,
        failure: None,
        skipped: None,
        envelopes: BTreeMap::new(),
        notes: Vec::new(),
        file: Some(path.display().to_string()),
        schema: None,
    };
    let full = format!("{}::{function}", ctx.prefix);
    if !ctx.published.has(function) {
        result.failure = Some(format!(
            "the target does not publish {full} (its profile lists it)"
        ));
        return result;
    }
    let info = ctx
        .env
        .client
        .trigger(TriggerRequest {
            function_id: "engine::functions::info".into(),
            payload: json!({ "function_id": full }),
            action: None,
            timeout_ms: Some(10_000),
        })
        .await;
    let entry = match info {
        Ok(v) => v,
        Err(e) => {
            result.failure = Some(format!("engine::functions::info {full}: {e}"));
            result.duration = started.elapsed();
            return result;
        }
    };
    let live = schema::FunctionSchemas::from_entry(&entry);
    result.schema = Some((function.to_string(), live.normalized()));
    if ctx.bless {
        let golden_entry = json!({
            "name": ctx.loaded.target.function(function),
            "description": entry.get("description").cloned().unwrap_or(Value::Null),
            "metadata": entry.get("metadata").cloned().unwrap_or(json!({})),
            "request_schema": live.request,
            "response_schema": live.response,
        });
        if let Err(e) = schema::write_golden(&path, &golden_entry) {
            result.failure = Some(format!("cannot write {}: {e}", path.display()));
        } else {
            result.notes.push(format!("blessed {}", path.display()));
        }
        result.duration = started.elapsed();
        return result;
    }
    match schema::load_golden(&path) {
        Err(e) => {
            result.failure = Some(format!(
                "{e} (generate it with `run --bless-schemas` and review the diff)"
            ))
        }
        Ok(g) => {
            let golden = schema::FunctionSchemas::from_entry(&g).normalized();
            let diffs = schema::differences(&golden, &live.normalized());
            if !diffs.is_empty() {
                let shown: Vec<String> = diffs.iter().take(10).cloned().collect();
                result.failure = Some(format!(
                    "schema drift in {full} against {}: {}{}",
                    path.display(),
                    shown.join("; "),
                    if diffs.len() > 10 {
                        format!(" (+{} more)", diffs.len() - 10)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    result.duration = started.elapsed();
    result
}
