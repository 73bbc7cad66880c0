//! Shared set-up of the worker benches: the hermetic bench in its VM-like
//! profile (or a live engine), the worker binary under a given config, a
//! client, direct `sandbox::*` baselines, and the JSON summary.
#![allow(dead_code)]

pub mod double_exec;
pub mod fan_in;
pub mod floor;
pub mod guest_middleware;
pub mod prestart;
pub mod scaling;
pub mod scopes;
pub mod session;
pub mod stream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use code_runner_conformance::standin::sandbox_double::SandboxLimits;
use code_runner_conformance::standin::stack::{Stack, StackOptions};
use code_runner_conformance::suite::case::UrlVia;
use code_runner_conformance::suite::env::{WorkerCommand, WorkerProcess};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::{json, Value};

/// The env var naming a live engine (with the real iii-sandbox connected).
pub const LIVE_ENGINE_VAR: &str = "SANDBOX_CODE_RUNNER_BENCH_ENGINE";

/// The daemon double with the real daemon's fixed costs: a guest boot paid
/// by the first call into a sandbox, and the 200 ms stop grace.
pub fn vm_like() -> SandboxLimits {
    SandboxLimits {
        boot_delay_ms: 300,
        stop_grace_ms: 200,
        // Room for 1000 kept runtimes (the memory curve), 64 parallel runs
        // and their direct baselines, and warm pools.
        max_concurrent_sandboxes: 1200,
        ..SandboxLimits::default()
    }
}

/// The hermetic bench: the stand-in engine on any port and the daemon
/// double in its VM-like profile.
pub fn hermetic_options() -> StackOptions {
    StackOptions {
        port: 0,
        engine: None,
        limits: vm_like(),
        configuration_dir: None,
        without_sandbox: false,
    }
}

/// The env var naming the live engine's guest listener, as guests reach it.
pub const LIVE_GUEST_URL_VAR: &str = "SANDBOX_CODE_RUNNER_BENCH_GUEST_URL";

/// The guest listener that workers started by the benches hand to guests:
/// the hermetic stack's RBAC listener, or the live one from the env var.
static GUEST_URL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Where the benches run.
pub enum Target {
    Hermetic(Box<Stack>),
    Live(String),
}

impl Target {
    /// The hermetic bench by default; the live engine when the env var is set.
    pub async fn from_env() -> Target {
        match std::env::var(LIVE_ENGINE_VAR) {
            Ok(url) if !url.trim().is_empty() => {
                eprintln!("benches run against the live engine {url}");
                let guest = std::env::var(LIVE_GUEST_URL_VAR)
                    .ok()
                    .filter(|g| !g.trim().is_empty());
                if guest.is_none() {
                    eprintln!(
                        "{LIVE_GUEST_URL_VAR} unset: guests get the worker's own engine URL \
                         (the python_iii_cold group needs guests to reach the engine)"
                    );
                }
                let _ = GUEST_URL.set(guest);
                Target::Live(url)
            }
            _ => {
                eprintln!(
                    "live-VM benches skipped: set {LIVE_ENGINE_VAR}=ws://… (an engine with the real \
                     iii-sandbox on a host whose KVM boots guests) to run them; running against the \
                     hermetic bench in its VM-like profile (boot 300 ms, stop grace 200 ms)"
                );
                let bench = Stack::start(hermetic_options())
                    .await
                    .expect("hermetic bench starts");
                let _ = GUEST_URL.set(bench.guest_url());
                Target::Hermetic(Box::new(bench))
            }
        }
    }

    pub fn url(&self) -> String {
        match self {
            Target::Hermetic(b) => b.url(),
            Target::Live(u) => u.clone(),
        }
    }

    /// The daemon's share, in ms, of the calls made since `since`: the
    /// stand-in engine's time from forwarding each `sandbox::exec` to its
    /// answer. `None` on a live engine, which does not expose it.
    pub fn exec_ms_since(&self, since: Instant) -> Option<f64> {
        let Target::Hermetic(stack) = self else {
            return None;
        };
        let relays = stack.engine()?.relays_since(since);
        Some(
            relays
                .iter()
                .filter(|r| r.function_id == "sandbox::exec")
                .map(|r| (r.answered_at - r.forwarded_at).as_secs_f64() * 1e3)
                .sum(),
        )
    }

    pub fn label(&self) -> &'static str {
        match self {
            Target::Hermetic(_) => "hermetic-vm-like",
            Target::Live(_) => "live",
        }
    }
}

/// A worker process under one config (the suite's [`WorkerProcess`]).
pub struct Worker {
    process: WorkerProcess,
}

impl Worker {
    pub async fn spawn(url: &str, client: &IIIClient, config: &str) -> Worker {
        Worker::spawn_with_env(url, client, config, &[]).await
    }

    /// A worker with extra environment variables (e.g. SDK telemetry switches).
    pub async fn spawn_with_env(
        url: &str,
        client: &IIIClient,
        config: &str,
        env: &[(&str, &str)],
    ) -> Worker {
        let guest_url = GUEST_URL.get().cloned().flatten();
        Worker::spawn_on(url, guest_url, client, config, env).await
    }

    /// A worker on the engine at `url` whose guests use `guest_url` (a
    /// stack of the bench's own, not the target's).
    pub async fn spawn_on(
        url: &str,
        guest_url: Option<String>,
        client: &IIIClient,
        config: &str,
        env: &[(&str, &str)],
    ) -> Worker {
        let mut vars = vec![("RUST_LOG", "warn")];
        vars.extend_from_slice(env);
        let process = WorkerProcess::spawn_with_env(
            &WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner")),
            url,
            UrlVia::Flag,
            Some(config),
            guest_url,
            &vars,
        )
        .expect("worker starts");
        let up = wait_until(Duration::from_secs(30), || async {
            call(client, "sandbox-code-runner::stats", json!({}))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "worker serves");
        Worker { process }
    }

    /// The worker's process id (for its resident memory).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGTERM, then wait: the worker stops every VM it owns.
    pub async fn stop(mut self) {
        self.process.stop().await;
    }
}

pub use code_runner_conformance::standin::wait::until as wait_until;

/// Whether the bench group `name` runs: all of them unless
/// `SCR_BENCH_GROUPS` lists some (comma-separated), e.g. for a quick profile.
pub fn group_enabled(name: &str) -> bool {
    listed_or_unset("SCR_BENCH_GROUPS", name)
}

/// Whether the `prestart` and `handler_fan_in` groups run `lang`'s figures:
/// both languages' unless `SCR_BENCH_LANGS` lists some (comma-separated).
pub fn lang_enabled(lang: &str) -> bool {
    listed_or_unset("SCR_BENCH_LANGS", lang)
}

/// Whether `name` is in the comma-separated list in `var`, or `var` names
/// none (unset or blank: everything runs).
fn listed_or_unset(var: &str, name: &str) -> bool {
    match std::env::var(var) {
        Ok(list) if !list.trim().is_empty() => list.split(',').any(|l| l.trim() == name),
        _ => true,
    }
}

pub async fn call(
    client: &IIIClient,
    function_id: &str,
    payload: Value,
) -> Result<Value, iii_sdk::Error> {
    client
        .trigger(TriggerRequest {
            function_id: function_id.into(),
            payload,
            action: None,
            timeout_ms: Some(120_000),
        })
        .await
}

pub async fn must(client: &IIIClient, function_id: &str, payload: Value) -> Value {
    call(client, function_id, payload)
        .await
        .unwrap_or_else(|e| panic!("{function_id} failed: {e:?}"))
}

/// Waits (untimed) until the worker's pool holds `n` warm VMs of `lang`.
pub async fn pool_ready(client: &IIIClient, lang: &str, n: u64) {
    stat_reaches(client, &format!("/pool_ready/{lang}"), n).await;
}

/// Waits (untimed) until the worker's stats figure at `pointer` (a JSON
/// pointer into `sandbox-code-runner::stats`) is at least `n`.
pub async fn stat_reaches(client: &IIIClient, pointer: &str, n: u64) {
    let ok = wait_until(Duration::from_secs(120), || async {
        call(client, "sandbox-code-runner::stats", json!({}))
            .await
            .is_ok_and(|s| s.pointer(pointer).and_then(Value::as_u64).unwrap_or(0) >= n)
    })
    .await;
    assert!(ok, "the worker's stats reach {pointer} >= {n}");
}

/// Waits (untimed) until the daemon holds at most `n` sandboxes.
pub async fn settled(client: &IIIClient, n: usize) {
    let ok = wait_until(Duration::from_secs(60), || async {
        call(client, "sandbox::list", json!({}))
            .await
            .is_ok_and(|l| l["sandboxes"].as_array().is_some_and(|a| a.len() <= n))
    })
    .await;
    assert!(ok, "the daemon settles to {n} sandboxes");
}

/// `sandbox::*` calls per operation of `op`, from the worker's own stats.
pub async fn calls_per_op(client: &IIIClient, op: &str) -> f64 {
    let s = must(client, "sandbox-code-runner::stats", json!({})).await;
    let ops = s[op]["ops"].as_f64().unwrap_or(0.0);
    let calls = s[op]["sandbox_calls"].as_f64().unwrap_or(0.0);
    if ops == 0.0 {
        0.0
    } else {
        calls / ops
    }
}

/// Worker-added latency recorded while benching, for the summary.
pub static ADDED_US: Mutex<BTreeMap<String, f64>> = Mutex::new(BTreeMap::new());

pub fn record_added(bench_id: &str, us: f64) {
    ADDED_US.lock().unwrap().insert(bench_id.to_string(), us);
    eprintln!("{bench_id}: worker adds {us:.1} µs/op on top of its sandbox calls");
}

/// Single figures (latency percentiles, memory, counts), for the summary.
pub static FIGURES: Mutex<BTreeMap<String, f64>> = Mutex::new(BTreeMap::new());

pub fn record_figure(id: &str, value: f64) {
    FIGURES.lock().unwrap().insert(id.to_string(), value);
    eprintln!("{id}: {value:.3}");
}

/// Figures with a ceiling: (value, limit). The summary says ok or OVER.
pub static BOUNDED: Mutex<BTreeMap<String, (f64, f64)>> = Mutex::new(BTreeMap::new());

/// A figure that has a ceiling (an issue's target), recorded like any other
/// and checked in the summary.
pub fn record_bounded(id: &str, value: f64, limit: f64) {
    record_figure(id, value);
    BOUNDED
        .lock()
        .unwrap()
        .insert(id.to_string(), (value, limit));
}

/// How many alternated pairs an overhead figure takes: `SCR_BENCH_PAIRS`,
/// else `default`.
pub fn pairs(default: usize) -> usize {
    std::env::var("SCR_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n >= 10)
        .unwrap_or(default)
}

/// The 2.5th and 97.5th percentiles of the p50 over 1,000 resamples: how
/// far the overhead figure could move on another run of this host.
pub(crate) fn bootstrap_p50(diffs: &[f64]) -> (f64, f64) {
    let mut medians: Vec<f64> = (0..1000)
        .map(|_| {
            p50((0..diffs.len())
                .map(|_| diffs[rand::random::<u32>() as usize % diffs.len()])
                .collect())
        })
        .collect();
    medians.sort_by(|a, b| a.total_cmp(b));
    (medians[25], medians[974])
}

pub(crate) fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A sandbox created directly (no worker), for the baselines.
pub async fn direct_create(client: &IIIClient, image: &str) -> String {
    let v = must(
        client,
        "sandbox::create",
        json!({"image": image, "network": true, "name": "bench-baseline"}),
    )
    .await;
    v["sandbox_id"].as_str().expect("sandbox_id").to_string()
}

/// The `sandbox::exec` payload of `p` in `sandbox_id`: what the worker
/// sends for the same exec.
pub fn exec_payload(sandbox_id: &str, p: &sandbox_code_runner::sandbox::ExecParams) -> Value {
    use base64::Engine as _;
    let mut payload = json!({
        "sandbox_id": sandbox_id,
        "argv": p.argv,
        "timeout_ms": p.timeout_ms,
        "env": p.env,
    });
    if let Some(stdin) = &p.stdin {
        payload["stdin"] = json!(base64::engine::general_purpose::STANDARD.encode(stdin));
    }
    if let Some(w) = &p.workdir {
        payload["workdir"] = json!(w);
    }
    payload
}

/// The exec of one call of a registered handler at `path` with the benches'
/// payload `{"n": 21}` and a fresh secret: what the worker sends for it.
pub fn handler_call_exec(
    lang: sandbox_code_runner::ids::Lang,
    function_id: &str,
    path: &str,
) -> sandbox_code_runner::sandbox::ExecParams {
    sandbox_code_runner::guest::invoke_exec(
        lang,
        function_id,
        path,
        sandbox_code_runner::guest::InvokeMode::Call,
        &json!({"n": 21}),
        &sandbox_code_runner::guest::new_secret(),
        10_000,
    )
}

/// `sandbox::exec` of exactly what the worker would exec.
pub async fn direct_exec(
    client: &IIIClient,
    sandbox_id: &str,
    p: &sandbox_code_runner::sandbox::ExecParams,
) -> Value {
    must(client, "sandbox::exec", exec_payload(sandbox_id, p)).await
}

pub async fn direct_stop(client: &IIIClient, sandbox_id: &str) {
    must(client, "sandbox::stop", json!({"sandbox_id": sandbox_id})).await;
}

/// Calls per operation recorded while benching, for the summary.
pub static CALLS_PER_OP: Mutex<BTreeMap<String, f64>> = Mutex::new(BTreeMap::new());

pub fn record_calls(bench_id: &str, calls: f64) {
    CALLS_PER_OP
        .lock()
        .unwrap()
        .insert(bench_id.to_string(), calls);
    eprintln!("{bench_id}: {calls:.2} sandbox calls/op");
}

fn criterion_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("criterion")
}

/// Per-iteration statistics of one criterion benchmark, in milliseconds.
pub fn stats_of(bench_id: &str) -> Option<Value> {
    // Criterion keeps `group/function` as given and turns a `/` inside the
    // function name into `_`; parameterised ids keep theirs.
    let (group, rest) = bench_id.split_once('/')?;
    let dir = [
        criterion_dir().join(group).join(rest),
        criterion_dir().join(group).join(rest.replace('/', "_")),
    ]
    .into_iter()
    .map(|d| d.join("new"))
    .find(|d| d.join("estimates.json").exists())?;
    let est: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("estimates.json")).ok()?).ok()?;
    let sample: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sample.json")).ok()?).ok()?;
    let iters = sample["iters"].as_array()?;
    let times = sample["times"].as_array()?;
    let per: Vec<f64> = iters
        .iter()
        .zip(times)
        .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?))
        .collect();
    let ms = |ns: f64| ns / 1e6;
    let min = per.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = per.iter().cloned().fold(0.0, f64::max);
    Some(json!({
        "mean_ms": ms(est["mean"]["point_estimate"].as_f64()?),
        "median_ms": ms(est["median"]["point_estimate"].as_f64()?),
        "sd_ms": ms(est["std_dev"]["point_estimate"].as_f64()?),
        "min_ms": ms(min),
        "max_ms": ms(max),
    }))
}

fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Writes `target/bench-summary-<name>.json` and prints the ratios.
pub fn write_summary(
    name: &str,
    target: &str,
    bench_ids: &[String],
    ratios: &[(&str, &str, &str, f64)],
) {
    let calls = CALLS_PER_OP.lock().unwrap().clone();
    let mut benches = serde_json::Map::new();
    for id in bench_ids {
        let mut entry = stats_of(id).unwrap_or_else(|| json!({}));
        if let Some(c) = calls.get(id) {
            entry["calls_per_op"] = json!(c);
        }
        if let Some(a) = ADDED_US.lock().unwrap().get(id) {
            entry["worker_added_us_mean"] = json!(a);
        }
        benches.insert(id.clone(), entry);
    }
    let mut ratio_out = Vec::new();
    eprintln!("\n== {name}: ratios (median over median, same run) ==");
    for (label, num, den, limit) in ratios {
        let m = |id: &str| benches.get(id).and_then(|b| b["median_ms"].as_f64());
        if let (Some(a), Some(b)) = (m(num), m(den)) {
            let r = a / b;
            let verdict = if r <= *limit { "ok" } else { "OVER" };
            eprintln!("{label}: {a:.3} ms / {b:.3} ms = {r:.3} (limit {limit}) {verdict}");
            ratio_out.push(json!({"name": label, "numerator": num, "denominator": den, "ratio": r, "limit": limit}));
        }
    }
    eprintln!("\n== {name}: paired ratios (p50 over p50, rounds alternated) ==");
    for r in prestart::PAIRED_RATIOS.lock().unwrap().iter() {
        eprintln!("{}", r.line());
        ratio_out.push(r.json());
    }
    // The per-call overheads have no ceiling of their own any more: a
    // target below the floor of any worker on the SDK (measured in the same
    // rounds) said nothing. What is bounded is the worker above that floor.
    let mut paired: serde_json::Map<String, Value> =
        floor::PAIRED
            .lock()
            .unwrap()
            .iter()
            .map(|(k, f)| {
                let o = f.wall.worker.p50;
                eprintln!("{k}: worker overhead (paired p50) {o:.3} ms");
                let (lo, hi) = f.wall.worker.ci;
                let mut entry = json!({"worker_p50_ms": f.worker_p50, "direct_p50_ms": f.direct_p50,
                                   "overhead_p50_ms": o, "overhead_p50_ci95_ms": [lo, hi],
                                   "floor": f.wall.json()});
                if let Some(h) = &f.daemon_excluded {
                    eprintln!(
                    "{k}: without the daemon's share: worker overhead {:.3} ms, floor {:.3} ms, \
                     worker above the floor {:.3} ms (limit {} ms) {}",
                    h.worker.p50,
                    h.floor.p50,
                    h.above_floor.p50,
                    floor::ABOVE_FLOOR_LIMIT_MS,
                    if h.above_floor.p50 <= floor::ABOVE_FLOOR_LIMIT_MS { "ok" } else { "OVER" }
                );
                    entry["daemon_excluded"] = h.json();
                }
                (k.clone(), entry)
            })
            .collect();
    for (k, f) in floor::PAIRED_DIFFS.lock().unwrap().iter() {
        eprintln!("{}", f.line(k));
        paired.insert(k.clone(), f.json());
    }
    let bounded: serde_json::Map<String, Value> = BOUNDED
        .lock()
        .unwrap()
        .iter()
        .map(|(k, (v, limit))| {
            let ok = v <= limit;
            eprintln!(
                "{k}: {v:.3} (limit {limit}) {}",
                if ok { "ok" } else { "OVER" }
            );
            (k.clone(), json!({"value": v, "limit": limit, "ok": ok}))
        })
        .collect();
    let figures: serde_json::Map<String, Value> = FIGURES
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let summary = json!({
        "paired_overhead": paired,
        "figures": figures,
        "bounded": bounded,
        "load_average": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "suite": name,
        "target": target,
        "git_revision": git_revision(),
        "benches": benches,
        "ratios": ratio_out,
    });
    let path = criterion_dir()
        .parent()
        .map(|p| p.join(format!("bench-summary-{name}.json")))
        .unwrap_or_else(|| PathBuf::from(format!("bench-summary-{name}.json")));
    let _ = std::fs::write(
        &path,
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    );
    eprintln!("summary written to {}", path.display());
}

/// A VM created directly and booted by one exec of `code`: the baseline of
/// "an exec on a running VM". The caller stops it.
pub async fn booted_direct_vm(
    client: &IIIClient,
    lang: sandbox_code_runner::ids::Lang,
    code: &str,
) -> String {
    let sid = direct_create(client, lang.image()).await;
    direct_exec(
        client,
        &sid,
        &sandbox_code_runner::guest::run_exec(lang, code, 10_000),
    )
    .await;
    sid
}

/// `n` one-shot python runs of `code` through the worker at once; the wall
/// time from the first call to the last answer.
pub async fn parallel_oneshots(client: &IIIClient, n: u64, code: &str) -> Duration {
    let t = Instant::now();
    let runs = (0..n).map(|_| {
        must(
            client,
            "sandbox-code-runner::run",
            json!({"lang": "python", "code": code}),
        )
    });
    futures_util::future::join_all(runs).await;
    t.elapsed()
}
