//! The case model: one YAML (or JSON) file per case under `golden/cases/`.
//!
//! ```yaml
//! id: run.one-shot.print
//! since: 0.1.0
//! level: contract
//! summary: A one-shot python run prints 2+2; nothing is left to address.
//! sources: ['seed-000 Running code: "iii trigger sandbox-code-runner::run lang=python code=''print(2+2)''"']
//! requires: [python]
//! steps:
//!   - trigger: run                   # the target's `<prefix>::run`
//!     payload: {lang: python, code: "print(2+2)"}
//!     expect:
//!       response: {stdout: "4\n", exit_code: 0, runtime_id: {$absent: true}}
//! cleanup: []
//! ```
//!
//! `level` says how binding the behaviour is (see [`Level`]); a `contract`
//! case quotes the seed sentence behind it, verbatim, in its `sources`.
//!
//! A step is exactly one of `trigger` (a function of the target, by suffix),
//! `call` (any function id), `action` (environment control or a probe) or
//! `parallel` (branches of steps run concurrently).

use super::load_error::LoadError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::matcher::Matcher;
use super::vars::Vars;

mod step;
mod validate;
pub(crate) use step::*;
use validate::validate_step;

/// How binding a case's behaviour is. The run's `--level` decides which
/// levels' failures fail it; reports group results by level.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A sentence of seed 000 (or seed 001, code-runner) requires it; the
    /// case quotes that sentence.
    Contract,
    /// Not in the contract text, but a review finding, security property or
    /// robustness behaviour a good worker should have.
    Recommended,
    /// This project's choice where the seeds are silent, or an
    /// implementation-defined value: runs only where the target's profile
    /// declares the value.
    Profile,
}

impl Level {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Contract => "contract",
            Level::Recommended => "recommended",
            Level::Profile => "profile",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `source` quotes a seed sentence: `seed-000 <where>: "<verbatim>"`
/// (or `seed-001`), the quote at least a few words long.
pub(crate) fn quotes_seed(source: &str) -> bool {
    let Some(rest) = source
        .strip_prefix("seed-000")
        .or_else(|| source.strip_prefix("seed-001"))
    else {
        return false;
    };
    let Some((_, quote)) = rest.split_once(": \"") else {
        return false;
    };
    quote.ends_with('"') && quote.trim_end_matches('"').split_whitespace().count() >= 3
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    /// Suite version that introduced the case (`x.y.z`).
    pub(crate) since: String,
    /// How binding the behaviour is; required.
    pub level: Level,
    /// One line for the reader of the case file.
    #[serde(default)]
    #[expect(dead_code, reason = "part of the case format, for its reader")]
    pub(crate) summary: String,
    /// Where the behaviour is promised (seed section, contract heading).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Profile features the target must have: `name`, `!name`, `name=value`.
    #[serde(default)]
    pub(crate) requires: Vec<String>,
    /// A private environment (hermetic mode only): its own engine, daemon
    /// double and worker process, configured as stated.
    #[serde(default)]
    pub(crate) environment: Option<EnvSpec>,
    /// Long-running: scheduled first so it overlaps the rest.
    #[serde(default)]
    pub(crate) slow: bool,
    /// What the stand-ins must model for the case to mean anything; where
    /// they cannot, the case is skipped with the fix.
    #[serde(default)]
    pub(crate) stand_in: Vec<StandInNeed>,
    pub(crate) steps: Vec<Step>,
    /// Steps that run after `steps`, whatever happened; failures are notes.
    #[serde(default)]
    pub(crate) cleanup: Vec<Step>,
    #[serde(skip)]
    pub file: PathBuf,
}

/// Something of the real infrastructure the stand-ins model only where the
/// host allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StandInNeed {
    /// A `network:true` sandbox's own network behind the daemon's gateway
    /// (the double needs slirp4netns on the host).
    SandboxNetwork,
}

/// A private environment of one case.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvSpec {
    /// Worker configuration (a mapping, written as the `--config` YAML).
    #[serde(default)]
    pub(crate) worker_config: Option<Value>,
    /// Worker configuration as literal file text (for invalid configs).
    #[serde(default)]
    pub(crate) worker_config_raw: Option<String>,
    /// Whether iii-sandbox is connected when the worker boots.
    #[serde(default = "yes")]
    pub(crate) sandbox: bool,
    /// Limits of the daemon double.
    #[serde(default)]
    pub(crate) sandbox_limits: Option<LimitsSpec>,
    /// How the worker learns the engine URL.
    #[serde(default)]
    pub(crate) url_via: UrlVia,
    /// `ready` (default): wait until the target's functions are listed.
    /// `exit`: the worker is expected to refuse to boot; steps observe it.
    #[serde(default)]
    pub(crate) boot: Boot,
    /// Start a configuration worker (the stand-in stack's double) before the worker
    /// boots, so its entry and hot-apply trigger are live.
    #[serde(default)]
    pub(crate) configuration_worker: bool,
    /// The case needs an engine with no configuration worker (never a real one).
    #[serde(default)]
    pub(crate) without_configuration_worker: bool,
    /// The environment only sharpens the case (a network condition, say):
    /// where no private environment can be made (a live engine), the case
    /// runs in the shared one instead of skipping.
    #[serde(default)]
    pub(crate) sharpens_only: bool,
}

fn yes() -> bool {
    true
}

/// Daemon-double limits a case may set (others keep the suite's defaults).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsSpec {
    pub(crate) max_concurrent_sandboxes: Option<usize>,
    pub(crate) reaper_interval_ms: Option<u64>,
    pub(crate) default_idle_timeout_secs: Option<u64>,
    /// `unreachable`: guests reach the gateway and nothing else (the
    /// double's `PackageRoute`).
    pub(crate) package_route: Option<crate::standin::sandbox_double::PackageRoute>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UrlVia {
    /// `--url <engine>`.
    #[default]
    Flag,
    /// `III_URL=<engine>` in the environment, no flag.
    Env,
    /// Neither: the engine listens on the default `127.0.0.1:49134`.
    Default,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Boot {
    #[default]
    Ready,
    Exit,
}

impl Case {
    /// The requirements its steps' `refine` entries name.
    pub(crate) fn refinements(&self) -> Vec<String> {
        let mut steps = self.all_steps();
        for s in &self.cleanup {
            s.walk(&mut steps);
        }
        steps
            .iter()
            .flat_map(|s| s.refine.keys().cloned())
            .collect()
    }

    /// This case with the refinements the target's profile meets folded in.
    pub(crate) fn refined(&self, holds: &dyn Fn(&str) -> bool) -> Case {
        let mut c = self.clone();
        c.steps = c.steps.iter().map(|s| s.refined(holds)).collect();
        c.cleanup = c.cleanup.iter().map(|s| s.refined(holds)).collect();
        c
    }

    /// This case lengthened by the floors the target's profile states.
    pub(crate) fn stretched(&self, value: &dyn Fn(&str) -> Option<f64>) -> Case {
        let mut c = self.clone();
        c.steps = c.steps.iter().map(|s| s.stretched(value)).collect();
        c.cleanup = c.cleanup.iter().map(|s| s.stretched(value)).collect();
        c
    }

    /// Every step of `steps` (nested included), not cleanup.
    pub(crate) fn all_steps(&self) -> Vec<&Step> {
        let mut out = Vec::new();
        for s in &self.steps {
            s.walk(&mut out);
        }
        out
    }

    /// Short error codes this case expects a target to produce.
    pub(crate) fn expected_codes(&self) -> BTreeSet<String> {
        self.all_steps()
            .iter()
            .filter_map(|s| s.expect.as_ref()?.error.as_ref())
            .map(|e| e.code().to_string())
            .collect()
    }

    /// Checks what can be checked without a target.
    pub fn validate(&self, suite_version: &str) -> Result<(), String> {
        if self.id.is_empty()
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        {
            return Err(format!("id `{}` must match [a-z0-9._-]+", self.id));
        }
        let since = parse_version(&self.since)
            .ok_or_else(|| format!("since `{}` is not x.y.z", self.since))?;
        let suite = parse_version(suite_version).unwrap_or((0, 0, 0));
        if since > suite {
            return Err(format!(
                "since {} is newer than this suite ({suite_version})",
                self.since
            ));
        }
        if self.steps.is_empty() {
            return Err("a case needs at least one step".into());
        }
        if let Some(s) = self
            .sources
            .iter()
            .find(|s| s.starts_with("worker-contract") || s.contains("shared/spec"))
        {
            return Err(format!(
                "source `{s}` cites a document outside the repository; cite `docs/contract.md: <heading>`"
            ));
        }
        match self.level {
            Level::Contract if !self.sources.iter().any(|s| quotes_seed(s)) => {
                return Err(
                    "a `contract` case quotes the seed sentence behind it: a source `seed-000 <section>: \"<verbatim sentence>\"` (or seed-001)"
                        .into(),
                )
            }
            Level::Profile if self.requires.is_empty() => {
                return Err(
                    "a `profile` case names the profile value it depends on in `requires`".into(),
                )
            }
            _ => {}
        }
        for r in &self.requires {
            if r.trim().is_empty() || r.starts_with("!=") {
                return Err(format!("bad requirement `{r}`"));
            }
            let feature = super::target::requirement_feature(r);
            if self.level == Level::Recommended && super::target::refines_only(feature) {
                return Err(format!(
                    "a `recommended` case checks `{feature}` whatever the profile says: move `{r}` from `requires` to a step's `refine` (a profile value refines a check, it never turns one off)"
                ));
            }
        }
        let private = self.environment.is_some();
        let mut steps = self.all_steps();
        for s in &self.cleanup {
            s.walk(&mut steps);
        }
        for (i, s) in steps.iter().enumerate() {
            validate_step(s, private).map_err(|e| format!("{}: {e}", s.label(i)))?;
        }
        if let Some(env) = &self.environment {
            if env.worker_config.is_some() && env.worker_config_raw.is_some() {
                return Err(
                    "environment: worker_config and worker_config_raw exclude each other".into(),
                );
            }
            if !matches!(&env.worker_config, Some(Value::Object(_)) | None) {
                return Err("environment.worker_config must be a mapping".into());
            }
        }
        Ok(())
    }
}

/// `x.y.z` → a comparable tuple.
pub(crate) fn parse_version(s: &str) -> Option<(u64, u64, u64)> {
    let mut it = s.split('.').map(|p| p.parse::<u64>().ok());
    let v = (it.next()??, it.next()??, it.next()??);
    if it.next().is_some() {
        return None;
    }
    Some(v)
}

/// Loads every `*.yaml`, `*.yml` and `*.json` under `dir`, sorted by id.
pub fn load_cases(dir: &Path, suite_version: &str) -> Result<Vec<Case>, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Read {
        path: dir.display().to_string(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    let mut cases = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let invalid = |message: String| LoadError::Invalid {
            path: path.display().to_string(),
            message,
        };
        // Through a JSON value: YAML and JSON files alike, and enums written
        // as one-key maps (`action: {locate_sandbox: {…}}`).
        let value: Value = serde_yaml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let mut case: Case = serde_path_to_error::deserialize(value)
            .map_err(|e| invalid(format!("{}: {}", e.path(), e.inner())))?;
        case.validate(suite_version).map_err(invalid)?;
        validate::profile_placeholders_required(&case, &text).map_err(invalid)?;
        if let Some(other) = seen.insert(case.id.clone(), path.clone()) {
            return Err(invalid(format!(
                "duplicate id `{}` (also in {})",
                case.id,
                other.display()
            )));
        }
        case.file = path;
        cases.push(case);
    }
    cases.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(cases)
}

/// A glob over case ids: `*` any run, `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}
