//! Where cases run: the engine, the daemon, the worker process, and the
//! suite's own client.
//!
//! - **hermetic**: the stand-in stack in-process (stand-in engine + iii-sandbox
//!   double) and the worker spawned from `--worker-cmd`;
//! - **live** (`--engine ws://…`): a running engine where the target is
//!   already connected; only the client is ours;
//! - **engine image** (`--engine-image`): a real engine in a container
//!   (testcontainers), the double attached to it, the worker spawned;
//! - **engine binary** (`--engine-bin`): like hermetic, but every engine —
//!   private ones included — is that real binary on a loopback port.
//!
//! Cases with an `environment` get a private one (hermetic and engine-binary
//! modes): their own engine, daemon double and worker, configured as they
//! state, so restarting a worker or starving the daemon never touches
//! another case.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iii_sdk::IIIClient;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::standin::config_double::ConfigDouble;
use crate::standin::engine::StandInEngine;
use crate::standin::sandbox_double::call_log::CallLog;
use crate::standin::sandbox_double::{SandboxDouble, SandboxLimits};
use crate::standin::stack::{
    GuestGate, ListenerLayout, Stack, StackError, StackOptions, StackParts,
};
use crate::standin::wait::Deadline;

use super::case::{Boot, EnvSpec, UrlVia};
use super::engine_bin::EngineProcess;

mod docker;
mod listing;
mod worker;
pub(crate) use docker::docker_answers;
use docker::split_image;
use listing::functions_gone;
pub(crate) use listing::{functions_listed, functions_present};
pub use worker::{BuildPolicy, WorkerCommand, WorkerProcess};

/// How long a worker may take to publish its functions.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// A worker publishing only part of its profile's functions is ready once
/// its published set has not changed for this long.
const SETTLE: Duration = Duration::from_secs(2);
/// How long a SIGTERMed worker may take to exit before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// The default engine port every SDK falls back to.
pub(crate) const DEFAULT_ENGINE_PORT: u16 = 49134;

/// Why an environment could not be set up or controlled.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The environment cannot exist here (no Docker, port taken…): the
    /// affected cases are skipped with this reason.
    #[error("{0}")]
    Unavailable(String),
    /// A check failed; the message says what was expected.
    #[error("{0}")]
    Failed(String),
    /// A step failed because of an underlying error, kept as the source.
    #[error("{context}")]
    Caused {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl EnvError {
    /// `context` failed because of `source`.
    pub(crate) fn caused(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> EnvError {
        EnvError::Caused {
            context: context.into(),
            source: source.into(),
        }
    }

    /// The whole chain on one line (`context: cause: …`), as a case report
    /// shows it.
    pub(crate) fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }
}

/// Limits of the double for the suite: defaults, minus the stop grace.
pub fn suite_limits() -> SandboxLimits {
    SandboxLimits {
        stop_grace_ms: 0,
        ..SandboxLimits::default()
    }
}

/// One environment cases run in.
pub(crate) struct Env {
    pub(crate) url: String,
    pub(crate) client: IIIClient,
    /// Full ids of the target's functions (readiness).
    functions: Vec<String>,
    bench: Option<Stack>,
    engine: Option<StandInEngine>,
    /// A real engine binary this environment started.
    engine_process: Option<EngineProcess>,
    double: Mutex<Option<SandboxDouble>>,
    limits: SandboxLimits,
    worker: Mutex<Option<WorkerProcess>>,
    container: Option<testcontainers::ContainerAsync<testcontainers::GenericImage>>,
    /// A configuration-worker double and its directory (private envs asking for one).
    configuration: Option<(ConfigDouble, PathBuf)>,
    /// What the daemon double served, where this environment has one.
    calls: std::sync::Mutex<Option<Arc<CallLog>>>,
    /// Cases running in this environment now (see `runner::timing`).
    pub(crate) running: AtomicUsize,
}

async fn connect(url: &str) -> Result<IIIClient, EnvError> {
    crate::standin::client::connect(url, "code-runner-conformance")
        .await
        .map_err(|e| EnvError::caused(format!("the suite's client cannot connect to {url}"), e))
}

impl Env {
    /// A live engine where the target is already connected.
    pub(crate) async fn live(url: &str, functions: Vec<String>) -> Result<Env, EnvError> {
        let client = connect(url).await?;
        if functions_present(&client, &functions)
            .await
            .is_none_or(|p| p.is_empty())
        {
            client.shutdown_async().await;
            return Err(EnvError::Failed(format!(
                "the engine at {url} lists none of {}: is the target connected?",
                functions.join(", ")
            )));
        }
        Ok(Env::bare(url, client, functions))
    }

    fn bare(url: &str, client: IIIClient, functions: Vec<String>) -> Env {
        Env {
            url: url.to_string(),
            client,
            functions,
            bench: None,
            engine: None,
            engine_process: None,
            double: Mutex::new(None),
            limits: suite_limits(),
            worker: Mutex::new(None),
            container: None,
            configuration: None,
            calls: std::sync::Mutex::new(None),
            running: AtomicUsize::new(0),
        }
    }

    /// The record of the `sandbox::*` calls the daemon double served, where
    /// this environment has a double (not against a live engine).
    pub(crate) fn sandbox_calls(&self) -> Option<Arc<CallLog>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note_double(&self, double: Option<&SandboxDouble>) {
        *self.calls.lock().unwrap_or_else(|p| p.into_inner()) = double.map(SandboxDouble::calls);
    }

    /// The engine, as a timing diagnosis names it.
    pub(crate) fn engine_kind(&self) -> &'static str {
        match (&self.engine_process, &self.container) {
            (Some(_), _) => "a real iii engine (--engine-bin)",
            (None, Some(_)) => "a real iii engine (--engine-image)",
            (None, None) if self.bench.is_some() || self.engine.is_some() => "the stand-in engine",
            (None, None) => "a live engine",
        }
    }

    /// The stand-in stack in-process and the worker spawned.
    /// `layout` says whether guests get a gated listener (a target whose
    /// profile declares `guest_listener`) or the main listener itself.
    pub(crate) async fn hermetic(
        cmd: &WorkerCommand,
        functions: Vec<String>,
        layout: ListenerLayout,
    ) -> Result<Env, EnvError> {
        let limits = suite_limits();
        let bench = Stack::start_with_layout(
            StackOptions {
                port: 0,
                engine: None,
                limits: limits.clone(),
                configuration_dir: None,
                without_sandbox: false,
            },
            layout,
        )
        .await
        .map_err(|e| EnvError::caused("the stand-in stack cannot start", e))?;
        let url = bench.url();
        let client = connect(&url).await?;
        let guest_url = bench.guest_url();
        Env::with_worker(&url, client, cmd, functions, guest_url, bench, limits).await
    }

    /// A real engine from a container image, the double attached, the worker
    /// spawned. Unavailable (not failed) where no Docker daemon answers.
    pub(crate) async fn engine_image(
        image: &str,
        port: u16,
        cmd: &WorkerCommand,
        functions: Vec<String>,
    ) -> Result<Env, EnvError> {
        use testcontainers::core::IntoContainerPort;
        use testcontainers::runners::AsyncRunner;

        docker_answers().map_err(EnvError::Unavailable)?;
        let (name, tag) = split_image(image);
        let container = testcontainers::GenericImage::new(name, tag)
            .with_exposed_port(port.tcp())
            .start()
            .await
            .map_err(|e| EnvError::caused(format!("cannot start {image}"), e))?;
        let host_port = container
            .get_host_port_ipv4(port.tcp())
            .await
            .map_err(|e| EnvError::caused(format!("{image} exposes no port {port}"), e))?;
        let url = format!("ws://127.0.0.1:{host_port}");
        let deadline = Deadline::after(READY_DEADLINE, Duration::from_millis(200));
        let client = loop {
            match crate::standin::client::connect(&url, "code-runner-conformance").await {
                Ok(c) => break c,
                Err(e) if !deadline.tick().await => {
                    return Err(EnvError::caused(
                        format!("the engine in {image} never accepted a worker at {url}"),
                        e,
                    ))
                }
                Err(_) => {}
            }
        };
        let mut env = Env::attached(&url, client, cmd, functions, None).await?;
        env.container = Some(container);
        Ok(env)
    }

    /// A real engine at `url` (reached by `client`): the daemon double
    /// attached to it, the worker spawned and published.
    async fn attached(
        url: &str,
        client: IIIClient,
        cmd: &WorkerCommand,
        functions: Vec<String>,
        guest_url: Option<String>,
    ) -> Result<Env, EnvError> {
        let limits = suite_limits();
        let stack = Stack::start(StackOptions {
            port: 0,
            engine: Some(url.to_string()),
            limits: limits.clone(),
            configuration_dir: None,
            without_sandbox: false,
        })
        .await
        .map_err(|e| EnvError::caused(format!("the daemon double cannot attach to {url}"), e))?;
        Env::with_worker(url, client, cmd, functions, guest_url, stack, limits).await
    }

    /// The worker spawned against `url` and published: the environment
    /// over `stack`.
    async fn with_worker(
        url: &str,
        client: IIIClient,
        cmd: &WorkerCommand,
        functions: Vec<String>,
        guest_url: Option<String>,
        stack: Stack,
        limits: SandboxLimits,
    ) -> Result<Env, EnvError> {
        let mut worker = WorkerProcess::spawn_with_guest(cmd, url, UrlVia::Flag, None, guest_url)?;
        worker.wait_ready(&client, &functions).await?;
        let mut env = Env::bare(url, client, functions);
        env.note_double(stack.sandbox());
        env.bench = Some(stack);
        env.limits = limits;
        env.worker = Mutex::new(Some(worker));
        Ok(env)
    }

    /// The real engine binary `bin` on a free loopback port, the daemon
    /// double attached, the worker spawned.
    /// With `guest`, the engine gets the gated layout: main listener on the
    /// host-only 127.0.0.2, an RBAC guest listener on 127.0.0.1.
    pub(crate) async fn engine_bin(
        bin: &Path,
        cmd: &WorkerCommand,
        functions: Vec<String>,
        guest: Option<&GuestGate>,
    ) -> Result<Env, EnvError> {
        let engine = EngineProcess::start_with(bin, 0, guest).await?;
        let url = engine.url();
        let client = connect(&url).await?;
        let mut env = Env::attached(&url, client, cmd, functions, engine.guest_url()).await?;
        env.engine_process = Some(engine);
        Ok(env)
    }

    /// A case's private environment: on the stand-in engine, or on a real
    /// engine binary when `engine_bin` names one; with `guest`, laid out as
    /// the shared environment's gated listeners are.
    pub(crate) async fn private(
        spec: &EnvSpec,
        cmd: &WorkerCommand,
        functions: Vec<String>,
        engine_bin: Option<&Path>,
        guest: Option<&GuestGate>,
    ) -> Result<Env, EnvError> {
        let port = match spec.url_via {
            UrlVia::Default => DEFAULT_ENGINE_PORT,
            _ => 0,
        };
        let taken = |e: String| {
            if port == DEFAULT_ENGINE_PORT {
                EnvError::Unavailable(format!(
                    "the default engine port {port} is taken on this host ({e})"
                ))
            } else {
                EnvError::caused("the engine cannot start", e)
            }
        };
        // A real engine brings its own engine and configuration worker; the
        // stand-ins come from the one stack type.
        let engine_process = match engine_bin {
            None => None,
            Some(bin) => {
                if spec.without_configuration_worker {
                    return Err(EnvError::Unavailable(
                        "needs an engine without a configuration worker; a real iii engine \
                         always runs its built-in one"
                            .into(),
                    ));
                }
                if port == DEFAULT_ENGINE_PORT
                    && std::net::TcpListener::bind(("127.0.0.1", port)).is_err()
                {
                    return Err(taken("in use".into()));
                }
                Some(EngineProcess::start_with(bin, port, guest).await?)
            }
        };
        let mut limits = suite_limits();
        if let Some(l) = &spec.sandbox_limits {
            if let Some(v) = l.max_concurrent_sandboxes {
                limits.max_concurrent_sandboxes = v;
            }
            if let Some(v) = l.reaper_interval_ms {
                limits.reaper_interval_ms = v;
            }
            if let Some(v) = l.default_idle_timeout_secs {
                limits.default_idle_timeout_secs = v;
            }
            if let Some(v) = l.package_route {
                limits.package_route = v;
            }
        }
        let config_dir = (spec.configuration_worker && engine_process.is_none()).then(|| {
            std::env::temp_dir().join(format!(
                "code-runner-conformance-config-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ))
        });
        let options = StackOptions {
            port,
            engine: engine_process.as_ref().map(EngineProcess::url),
            limits: limits.clone(),
            configuration_dir: config_dir.clone(),
            without_sandbox: !spec.sandbox,
        };
        let mut guest_url = engine_process.as_ref().and_then(EngineProcess::guest_url);
        let layout = match guest {
            Some(g) if engine_process.is_none() => ListenerLayout::guarded(&g.prefix, 0, g.tenancy),
            _ => ListenerLayout::open(),
        };
        let stack = match Stack::start_with_layout(options, layout).await {
            Ok(s) => {
                guest_url = s.guest_url().or(guest_url);
                s.into_parts()
            }
            Err(StackError::Bind { source, .. }) => return Err(taken(source.to_string())),
            Err(StackError::Sandbox(e)) => {
                return Err(EnvError::caused("the daemon double cannot start", e))
            }
            Err(StackError::Configuration(e)) => {
                return Err(EnvError::caused(
                    "the configuration-worker double cannot start",
                    e,
                ))
            }
        };
        let StackParts {
            engine,
            url,
            sandbox: double,
            configuration,
        } = stack;
        let configuration = configuration.zip(config_dir);
        let client = connect(&url).await?;
        let config = match (&spec.worker_config, &spec.worker_config_raw) {
            (Some(v), _) => {
                Some(serde_yaml::to_string(v).map_err(|e| EnvError::caused("worker_config", e))?)
            }
            (None, Some(raw)) => Some(raw.clone()),
            (None, None) => None,
        };
        let mut worker =
            WorkerProcess::spawn_with_guest(cmd, &url, spec.url_via, config.as_deref(), guest_url)?;
        if spec.boot == Boot::Ready {
            if let Err(e) = worker.wait_ready(&client, &functions).await {
                drop(worker);
                client.shutdown_async().await;
                if let Some((c, dir)) = configuration {
                    c.shutdown().await;
                    let _ = std::fs::remove_dir_all(dir);
                }
                if let Some(d) = double {
                    d.shutdown().await;
                }
                if let Some(engine) = engine {
                    engine.shutdown().await;
                }
                if let Some(p) = engine_process {
                    p.shutdown().await;
                }
                return Err(e);
            }
        }
        let mut env = Env::bare(&url, client, functions);
        env.configuration = configuration;
        env.engine = engine;
        env.engine_process = engine_process;
        env.note_double(double.as_ref());
        env.double = Mutex::new(double);
        env.limits = limits;
        env.worker = Mutex::new(Some(worker));
        Ok(env)
    }

    /// The worker's stdout and stderr so far.
    pub(crate) async fn worker_log(&self) -> Result<String, EnvError> {
        let w = self.worker.lock().await;
        let w = w
            .as_ref()
            .ok_or_else(|| EnvError::Failed("no worker process in this environment".into()))?;
        Ok(w.log())
    }

    /// SIGTERM the worker, wait for it and its functions to go, start it
    /// again and wait until it serves.
    pub(crate) async fn restart_worker(&self) -> Result<Value, EnvError> {
        let status = self.stop_worker_inner().await?;
        let mut guard = self.worker.lock().await;
        let w = guard
            .as_mut()
            .ok_or_else(|| EnvError::Failed("no worker process in this environment".into()))?;
        w.respawn()?;
        w.wait_ready(&self.client, &self.functions).await?;
        Ok(json!({ "previous_exit_code": status }))
    }

    async fn stop_worker_inner(&self) -> Result<Option<i32>, EnvError> {
        let status = {
            let mut guard = self.worker.lock().await;
            let w = guard
                .as_mut()
                .ok_or_else(|| EnvError::Failed("no worker process in this environment".into()))?;
            w.stop().await
        };
        let gone = crate::standin::wait::until(READY_DEADLINE, || {
            functions_gone(&self.client, &self.functions)
        })
        .await;
        if !gone {
            return Err(EnvError::Failed(
                "the stopped worker's functions are still listed".into(),
            ));
        }
        Ok(status.and_then(|s| s.code()))
    }

    /// SIGTERM the worker and wait: `{exit_code}`.
    pub(crate) async fn stop_worker(&self) -> Result<Value, EnvError> {
        let code = self.stop_worker_inner().await?;
        Ok(json!({ "exit_code": code }))
    }

    /// Waits for the worker to exit by itself.
    pub(crate) async fn worker_exit(&self, within: Duration) -> Result<Value, EnvError> {
        let mut guard = self.worker.lock().await;
        let w = guard
            .as_mut()
            .ok_or_else(|| EnvError::Failed("no worker process in this environment".into()))?;
        Ok(match w.wait_exit(within).await {
            Some(s) => json!({"exited": true, "success": s.success(), "exit_code": s.code()}),
            None => json!({"exited": false}),
        })
    }

    /// Connects the daemon double (after a boot without it).
    pub(crate) async fn start_sandbox(&self) -> Result<Value, EnvError> {
        let mut guard = self.double.lock().await;
        if guard.is_some() || self.bench.is_some() {
            return Err(EnvError::Failed("iii-sandbox is already connected".into()));
        }
        let d = SandboxDouble::start(&self.url, self.limits.clone())
            .await
            .map_err(|e| EnvError::caused("the daemon double cannot start", e))?;
        self.note_double(Some(&d));
        *guard = Some(d);
        Ok(json!({ "started": true }))
    }

    /// Stops everything this environment started.
    pub(crate) async fn shutdown(self) {
        let Env {
            client,
            bench,
            engine,
            engine_process,
            double,
            worker,
            container,
            configuration,
            ..
        } = self;
        if let Some(mut w) = worker.into_inner() {
            w.stop().await;
        }
        client.shutdown_async().await;
        if let Some((c, dir)) = configuration {
            c.shutdown().await;
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(d) = double.into_inner() {
            d.shutdown().await;
        }
        if let Some(b) = bench {
            b.shutdown().await;
        }
        if let Some(e) = engine {
            e.shutdown().await;
        }
        if let Some(p) = engine_process {
            p.shutdown().await;
        }
        if let Some(c) = container {
            let _ = c.rm().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_split_into_name_and_tag() {
        assert_eq!(split_image("iii:1.2"), ("iii".into(), "1.2".into()));
        assert_eq!(
            split_image("ghcr.io/iii-hq/iii"),
            ("ghcr.io/iii-hq/iii".into(), "latest".into())
        );
        assert_eq!(
            split_image("localhost:5000/iii:rc"),
            ("localhost:5000/iii".into(), "rc".into())
        );
    }
}
