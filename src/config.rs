//! The file configuration (`--config <yaml>`) and the clamping it implies.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Worker configuration. Unknown keys are refused at boot so that a typo
/// never silently falls back to a default.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Budget of a run or handler call that names none (or 0).
    pub default_timeout_ms: u64,
    /// Ceiling every budget is clamped to, the default's included.
    pub max_timeout_ms: u64,
    /// Passed to `sandbox::create` as `idle_timeout_secs`.
    pub idle_ttl_secs: u64,
    /// Per-stream cap on stdout/stderr returned to callers; 0 disables it.
    pub max_stream_bytes: usize,
    /// Largest `result` a run answers, as JSON bytes; over it the value is
    /// replaced whole by seed 001's omission marker. 0 disables the cap.
    pub max_result_bytes: usize,
    /// Budget of the one-time Python SDK install in a runtime; never charged
    /// to a caller's `timeout_ms`.
    pub sdk_install_timeout_ms: u64,
    /// Stable identity of this worker's VMs across restarts (default: the
    /// host name). At boot, VMs named for this owner but another process are
    /// orphans and get stopped; give replicas on one host distinct owners.
    pub vm_owner: Option<String>,
    /// Pre-booted VMs kept per language (0 disables the pool). Each is
    /// created with the same parameters as any run's VM and warmed by one
    /// cheap exec, so a run that takes it does not pay the guest's boot.
    pub warm_pool: usize,
    /// When a one-shot VM is stopped.
    pub oneshot_stop: OneshotStop,
    /// The engine's guest listener (an RBAC `iii-worker-manager` entry whose
    /// auth function is `sandbox-code-runner::guest-auth`) as guests reach
    /// it, e.g. `ws://127.0.0.1:49135`. Set, every guest's `iii` connects
    /// there with a per-run token; unset, guests get the worker's own engine
    /// URL and can call every function on the bus (warned at boot).
    pub guest_url: Option<String>,
    /// VMs the guests of one tenant (lineage) may hold at once through the
    /// guest listener: their in-flight runs plus the kept and namespace
    /// runtimes they created. Past it a guest's run gets `capacity`, and the
    /// rest of the daemon stays for everyone else. Never applies to the main
    /// listener.
    pub guest_max_concurrent_runs: usize,
    /// Keep a fresh interpreter of its language waiting in every kept and
    /// namespace runtime and every pooled VM (wrapper and iii SDK module
    /// loaded, nothing connected, no token), so a call or run hands it its
    /// request instead of starting one. Each call still gets a fresh
    /// process. Off: every call starts its interpreter (the old path).
    pub prestart: bool,
    /// With `prestart`, node calls run in fresh scopes of long-lived
    /// per-slot servers (a fresh V8 context per handler call; a worker
    /// thread for what a context cannot give as a process would) instead
    /// of a fresh process each: a call's globals, modules, env, listeners,
    /// exit and deadline are still its own (docs/contract.md says what it
    /// shares: the process id), for a fraction of a process start's CPU
    /// (docs/performance.md). Off: each node call takes a pre-started
    /// process.
    pub node_scopes: bool,
    /// Calls of one namespace runtime that run at once, each in its own
    /// fresh interpreter process; the rest queue per caller and are served
    /// in turn. The default is the daemon's execs per sandbox, whole: the
    /// worker keeps none aside, because every exec it makes in a namespace
    /// runtime of its own (a registration's check, an SDK install) queues
    /// for these same slots. 1 serves one call at a time. Runs into one
    /// kept runtime are always one at a time.
    pub handler_concurrency: usize,
    /// Whether a `keep: true` run that does not say (`session`) keeps its
    /// interpreter: later runs into the runtime see its globals and
    /// imported modules, as code-runner's kept runtimes do. Off: each run
    /// is a fresh process on the same files (seed 000's promise).
    pub sessions: bool,
    /// How deep guest runs may nest (a run started by guest code is one
    /// level deeper than the code that started it).
    pub guest_max_run_depth: u32,
    /// Lifecycle subscriptions the guests of one tenant may hold at once.
    pub guest_max_subscriptions: usize,
    /// Functions the guests of one tenant may have registered on their own
    /// connections at once.
    pub guest_max_registrations: usize,
    /// The daemon's `max_concurrent_sandboxes` (32 unless its operator
    /// changed it): what [`Config::guest_max_share`] is a share of.
    pub daemon_max_sandboxes: usize,
    /// The share of the daemon's sandboxes that guest code of every tenant
    /// together may hold (0.0 to 1.0), so trusted callers always find room.
    pub guest_max_share: f64,
}

/// When the VM of a one-shot run is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OneshotStop {
    /// Before the response is sent: the contract's default. The response
    /// waits until the VM is gone: the daemon confirmed the stop, or the
    /// run's lifeline exec showed the VM ended after the stop was sent (the
    /// daemon's SIGTERM ends it at once; its 200 ms grace and the removal of
    /// its entry follow after the response).
    #[default]
    BeforeResponse,
    /// Before the response, and the response waits for the daemon to
    /// confirm the stop: entry and scratch removed, its capacity slot free
    /// (~200 ms more on the real daemon). No lifeline exec.
    StopConfirmed,
    /// After the response: the VM is already unaddressable (no runtime_id
    /// exists), but it holds its capacity slot ~200 ms longer, and a crash in
    /// that window leaves an orphan for the next boot's sweep.
    Background,
}

impl Config {
    /// How calls find a fresh interpreter (`prestart`, `node_scopes`).
    pub(crate) fn prestart_mode(&self) -> crate::prestart::Prestart {
        use crate::prestart::Prestart;
        match (self.prestart, self.node_scopes) {
            (false, _) => Prestart::Off,
            (true, false) => Prestart::Processes,
            (true, true) => Prestart::NodeScopes,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default_timeout_ms: 5_000,
            max_timeout_ms: 30_000,
            idle_ttl_secs: 900,
            max_stream_bytes: 16_384,
            max_result_bytes: 32_768,
            sdk_install_timeout_ms: 120_000,
            vm_owner: None,
            warm_pool: 1,
            oneshot_stop: OneshotStop::BeforeResponse,
            guest_url: None,
            guest_max_concurrent_runs: 4,
            guest_max_run_depth: 4,
            prestart: true,
            node_scopes: true,
            handler_concurrency: crate::daemon_limits::DAEMON.max_execs_per_sandbox.value,
            sessions: false,
            guest_max_subscriptions: 8,
            guest_max_registrations: 64,
            daemon_max_sandboxes: crate::daemon_limits::DAEMON.max_sandboxes.value,
            guest_max_share: 0.5,
        }
    }
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {path}: {message}")]
    Invalid { path: String, message: String },
}

impl Config {
    /// Loads a YAML file; an empty file means all defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses YAML text, naming the offending key on error.
    pub fn parse(text: &str) -> Result<Config, String> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let config: Config = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if config.max_timeout_ms == 0 {
            return Err("max_timeout_ms must be greater than 0".into());
        }
        if let Some(url) = &config.guest_url {
            check_guest_url(url)?;
        }
        if config.handler_concurrency == 0 {
            return Err("handler_concurrency must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&config.guest_max_share) {
            return Err("guest_max_share must be between 0.0 and 1.0".into());
        }
        Ok(config)
    }

    /// VMs guest code of every tenant together may hold.
    pub(crate) fn guest_vm_ceiling(&self) -> usize {
        (self.daemon_max_sandboxes as f64 * self.guest_max_share).floor() as usize
    }

    /// The budget a request gets: missing or 0 means the default, and the
    /// result never exceeds the maximum — the default path included.
    pub(crate) fn clamp_timeout(&self, requested: Option<u64>) -> u64 {
        let wanted = match requested {
            None | Some(0) => self.default_timeout_ms,
            Some(ms) => ms,
        };
        wanted.min(self.max_timeout_ms).max(1)
    }
}

/// A guest URL is a bare `ws://` or `wss://` URL: the token is appended
/// as the query string.
pub fn check_guest_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("ws://")
        .or_else(|| url.strip_prefix("wss://"))
        .ok_or_else(|| format!("guest_url must start with ws:// or wss:// (got {url:?})"))?;
    if rest.is_empty() || rest.contains('?') || rest.contains('#') {
        return Err(format!(
            "guest_url must be ws://HOST:PORT with no query (got {url:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// The README's configuration table documents exactly the keys the
    /// worker accepts: adding a key without documenting it fails here.
    #[test]
    fn readme_documents_every_config_key() {
        let readme = include_str!("../README.md");
        let start = readme
            .find("| key | default | meaning |")
            .expect("README has the configuration table");
        let documented: std::collections::BTreeSet<String> = readme[start..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                l.split('|')
                    .nth(1)
                    .unwrap_or("")
                    .trim()
                    .trim_matches('`')
                    .to_string()
            })
            .collect();
        let accepted: std::collections::BTreeSet<String> =
            match serde_yaml::to_value(Config::default()).expect("config serializes") {
                serde_yaml::Value::Mapping(m) => m
                    .keys()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect(),
                other => panic!("config is not a mapping: {other:?}"),
            };
        assert_eq!(documented, accepted);
    }

    #[rstest]
    #[case(None, 5_000)]
    #[case(Some(0), 5_000)]
    #[case(Some(1_000), 1_000)]
    #[case(Some(30_000), 30_000)]
    #[case(Some(999_999), 30_000)]
    fn timeouts_are_clamped(#[case] requested: Option<u64>, #[case] expected: u64) {
        assert_eq!(Config::default().clamp_timeout(requested), expected);
    }

    #[test]
    fn a_default_above_the_max_is_clamped_too() {
        let c = Config {
            default_timeout_ms: 60_000,
            max_timeout_ms: 10_000,
            ..Config::default()
        };
        assert_eq!(c.clamp_timeout(None), 10_000);
        assert_eq!(c.clamp_timeout(Some(0)), 10_000);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = Config::parse("default_timeout_ms: 10\nmax_timout_ms: 5\n").unwrap_err();
        assert!(err.contains("max_timout_ms"), "{err}");
    }

    #[test]
    fn fast_path_knobs_parse() {
        let c = Config::parse("warm_pool: 3\noneshot_stop: background\n").unwrap();
        assert_eq!(c.warm_pool, 3);
        assert_eq!(c.oneshot_stop, OneshotStop::Background);
        assert!(Config::parse("oneshot_stop: later\n").is_err());
        let c = Config::parse("oneshot_stop: stop_confirmed\n").unwrap();
        assert_eq!(c.oneshot_stop, OneshotStop::StopConfirmed);
        assert_eq!(Config::default().warm_pool, 1);
        assert_eq!(Config::default().oneshot_stop, OneshotStop::BeforeResponse);
    }

    #[rstest]
    #[case("guest_url: ws://127.0.0.1:49135\n", true)]
    #[case("guest_url: wss://engine:443/guests\n", true)]
    #[case("guest_url: http://127.0.0.1:1\n", false)]
    #[case("guest_url: ws://127.0.0.1:1/?token=x\n", false)]
    fn guest_url_is_a_bare_websocket_url(#[case] yaml: &str, #[case] ok: bool) {
        assert_eq!(Config::parse(yaml).is_ok(), ok, "{yaml}");
    }

    #[test]
    fn yaml_overrides_defaults() {
        let c = Config::parse("idle_ttl_secs: 5\nmax_stream_bytes: 0\n").unwrap();
        assert_eq!(c.idle_ttl_secs, 5);
        assert_eq!(c.max_stream_bytes, 0);
        assert_eq!(c.default_timeout_ms, 5_000);
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }
}
