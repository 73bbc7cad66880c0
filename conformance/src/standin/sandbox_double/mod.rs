//! A double of the iii-sandbox daemon: an ordinary iii worker named
//! `iii-sandbox` serving the `sandbox::*` functions the way the real daemon
//! does (see `docs/sandbox.md`), with Linux namespaces in
//! place of microVMs.
//!
//! - `limits`: operator limits and their `--sandbox-*` flags.
//! - `error`: the S-code envelope.
//! - `registry`: the sandbox table, idle clock, stop sequence and reaper.
//! - `isolation`: namespaced process spawning on per-sandbox scratch roots;
//!   `users`: the ids a sandbox maps (guest root, and the images' users
//!   where the host allows).
//! - `image_layer`: each image's one shared writable rootfs layer; `presets`:
//!   what the python and node images hold beyond the host's `/usr` and `/etc`.
//! - `private_tmpfs`: where sandboxes' private directories live (tmpfs, like the daemon's).
//! - `guest_path`: what a path means inside a sandbox.
//! - `lifecycle`, `exec`, `fs_ops`, `run`: the handlers.
//! - `call_log`: what the handlers served, when and for how long (read by
//!   the suite to explain a missed time bound).

pub(crate) mod call_log;
pub(crate) mod daemon;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod fs_ops;
pub(crate) mod guest_path;
pub(crate) mod image_layer;
pub(crate) mod isolation;
pub(crate) mod lifecycle;
pub(crate) mod limits;
pub mod network;
pub(crate) mod presets;
pub mod private_tmpfs;
pub(crate) mod registry;
pub(crate) mod run;
pub mod users;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::{FunctionRef, WorkerMetadata};
use iii_sdk::{register_worker, IIIClient, InitOptions, RegisterFunction, WorkerIdentityMode};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use limits::{PackageRoute, SandboxArgs, SandboxLimits};

use call_log::{CallLog, Noted};
use daemon::Daemon;
use error::DaemonError;
use isolation::Isolation;

/// The worker name the real daemon registers under.
pub(crate) const WORKER_NAME: &str = "iii-sandbox";

/// Every function the double serves.
pub(crate) const FUNCTIONS: [&str; 9] = [
    "sandbox::create",
    "sandbox::exec",
    "sandbox::stop",
    "sandbox::list",
    "sandbox::run",
    "sandbox::catalog::list",
    "sandbox::fs::write",
    "sandbox::fs::read",
    "sandbox::fs::mkdir",
];

/// How long `start` waits for the engine to accept the worker and show its
/// functions.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the double could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxDoubleError {
    /// Namespaces do not work here; the double refuses to run rather than
    /// share host paths between sandboxes.
    #[error("{0}")]
    IsolationUnavailable(String),
    #[error("cannot start the sandbox double's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot register `{WORKER_NAME}` with the engine at {url}: {reason}")]
    Connect { url: String, reason: String },
}

/// A running daemon double.
pub struct SandboxDouble {
    daemon: Arc<Daemon>,
    client: IIIClient,
    functions: Vec<FunctionRef>,
    /// Every call served, for the suite's timing diagnostics.
    calls: Arc<CallLog>,
    reaper: tokio::task::JoinHandle<()>,
    /// The double's own runtime: handlers run here, not on the SDK's
    /// single-threaded connection runtime, and regardless of the caller's.
    runtime: Option<tokio::runtime::Runtime>,
}

impl SandboxDouble {
    /// Connects as an ordinary iii worker named `iii-sandbox` to
    /// `engine_url` and registers the `sandbox::*` functions. Fails if
    /// namespace isolation is unavailable on this host.
    pub async fn start(
        engine_url: &str,
        limits: SandboxLimits,
    ) -> Result<SandboxDouble, SandboxDoubleError> {
        let isolation = Isolation::new().map_err(SandboxDoubleError::IsolationUnavailable)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("iii-sandbox-double")
            .enable_all()
            .build()
            .map_err(SandboxDoubleError::Runtime)?;
        let probe = runtime.spawn(async move {
            let r = isolation.probe().await;
            (isolation, r)
        });
        // On failure the runtime is shut down explicitly: dropping one
        // inside async code panics.
        let isolation = match probe.await {
            Ok((isolation, Ok(()))) => isolation,
            Ok((_, Err(reason))) => {
                runtime.shutdown_background();
                return Err(SandboxDoubleError::IsolationUnavailable(reason));
            }
            Err(e) => {
                runtime.shutdown_background();
                return Err(SandboxDoubleError::IsolationUnavailable(format!(
                    "the isolation probe crashed: {e}"
                )));
            }
        };

        let daemon = Arc::new(Daemon::new(isolation, limits));
        let client = register_worker(
            engine_url,
            InitOptions {
                metadata: Some(WorkerMetadata {
                    name: WORKER_NAME.to_string(),
                    description: Some(
                        "iii-sandbox double: sandbox::* over Linux namespaces".to_string(),
                    ),
                    telemetry: None,
                    ..WorkerMetadata::default()
                }),
                identity: WorkerIdentityMode::Explicit,
                ..InitOptions::default()
            },
        );
        daemon.attach(&client);
        let calls = Arc::new(CallLog::default());
        let functions = register_all(&client, &daemon, runtime.handle(), &calls);

        let reaper = runtime.spawn(registry::run_reaper(
            daemon.registry.clone(),
            Duration::from_millis(daemon.limits.reaper_interval_ms),
            daemon.busy_grace(),
            daemon.stop_grace(),
        ));

        let double = SandboxDouble {
            daemon,
            client,
            functions,
            calls,
            reaper,
            runtime: Some(runtime),
        };
        if let Err(reason) = double.wait_ready().await {
            let url = engine_url.to_string();
            double.shutdown().await;
            return Err(SandboxDoubleError::Connect { url, reason });
        }
        Ok(double)
    }

    /// Waits until the engine has accepted the worker and lists every
    /// function, so callers can use them as soon as `start` returns.
    async fn wait_ready(&self) -> Result<(), String> {
        self.client
            .wait_until_registered(READY_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        // An engine without the listing builtin answers an error: then
        // registration is all there is to wait for.
        let listed = crate::standin::wait::until(READY_TIMEOUT, || async {
            let Ok(listed) = self
                .client
                .trigger(TriggerRequest {
                    function_id: "engine::functions::list".to_string(),
                    payload: serde_json::json!({ "prefix": "sandbox::" }),
                    action: None,
                    timeout_ms: Some(2_000),
                })
                .await
            else {
                return true;
            };
            let ids: Vec<&str> = listed["functions"]
                .as_array()
                .map(|a| a.iter().filter_map(|f| f["function_id"].as_str()).collect())
                .unwrap_or_default();
            FUNCTIONS.iter().all(|f| ids.contains(f))
        })
        .await;
        if listed {
            Ok(())
        } else {
            Err("the engine never listed the sandbox::* functions".to_string())
        }
    }

    /// Stops every sandbox (kills all processes, removes scratch dirs) and
    /// disconnects.
    pub async fn shutdown(mut self) {
        for f in &self.functions {
            f.unregister();
        }
        self.reaper.abort();
        let daemon = self.daemon.clone();
        if let Some(rt) = self.runtime.as_ref() {
            let stopping = rt.spawn(async move {
                let grace = daemon.stop_grace();
                let all = daemon.registry.close_and_claim_all();
                let stops = all
                    .into_iter()
                    .map(|work| {
                        let d = daemon.clone();
                        tokio::spawn(async move { d.registry.finish_stop(work, grace).await })
                    })
                    .collect::<Vec<_>>();
                for s in stops {
                    let _ = s.await;
                }
            });
            let _ = stopping.await;
        }
        self.daemon.isolation.discard_state();
        self.daemon.detach();
        self.client.shutdown_async().await;
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// Ids and names of live sandboxes.
    pub fn live(&self) -> Vec<(String, Option<String>)> {
        self.daemon.registry.live()
    }

    /// The record of the calls this double served.
    pub(crate) fn calls(&self) -> Arc<CallLog> {
        self.calls.clone()
    }
}

impl Drop for SandboxDouble {
    /// Without `shutdown`: kill whatever still runs and delete the scratch
    /// directories, synchronously and without the stop grace.
    fn drop(&mut self) {
        let Some(rt) = self.runtime.take() else {
            return;
        };
        self.reaper.abort();
        for work in self.daemon.registry.close_and_claim_all() {
            work.kill_now();
        }
        self.daemon.isolation.discard_state();
        self.daemon.detach();
        // `shutdown_async` never actually suspends: polling it once runs it.
        let _ = futures_util::FutureExt::now_or_never(self.client.shutdown_async());
        rt.shutdown_background();
    }
}

/// What registering a handler needs: the client, the double's runtime and
/// its state.
struct Registrar<'a> {
    client: &'a IIIClient,
    rt: &'a tokio::runtime::Handle,
    daemon: &'a Arc<Daemon>,
    calls: &'a Arc<CallLog>,
}

impl Registrar<'_> {
    /// Registers one typed handler, run on the double's runtime. A payload
    /// that does not deserialize fails in the SDK (`serialization error: …`)
    /// before the handler runs, as on the daemon. Each call is recorded in
    /// the call log (what it was about, how long it took, how it ended).
    fn register<Req, Resp, F, Fut>(&self, id: &str, description: &str, handler: F) -> FunctionRef
    where
        Req: DeserializeOwned + JsonSchema + Noted + Send + 'static,
        Resp: Serialize + JsonSchema + Noted + Send + 'static,
        F: Fn(Arc<Daemon>, Req) -> Fut + Send + Sync + Copy + 'static,
        Fut: Future<Output = Result<Resp, DaemonError>> + Send + 'static,
    {
        let rt = self.rt.clone();
        let daemon = self.daemon.clone();
        let name = id.to_string();
        let calls = self.calls.clone();
        self.client.register_function(
            id,
            RegisterFunction::new_async(move |req: Req| {
                let call = calls.begin(&name, req.note().unwrap_or_default());
                let task = rt.spawn(handler(daemon.clone(), req));
                let name = name.clone();
                let calls = calls.clone();
                async move {
                    match task.await {
                        Ok(Ok(resp)) => {
                            calls.end(call, "ok".into(), resp.note());
                            Ok(resp)
                        }
                        Ok(Err(e)) => {
                            calls.end(call, e.code().as_str().into(), None);
                            tracing::debug!(function = %name, error = %e, "sandbox call failed");
                            Err(iii_sdk::Error::from(e))
                        }
                        Err(e) => {
                            calls.end(call, "handler task failed".into(), None);
                            Err(iii_sdk::Error::from(DaemonError::BootFailed(format!(
                                "handler task: {e}"
                            ))))
                        }
                    }
                }
            })
            .description(description),
        )
    }
}

fn register_all(
    client: &IIIClient,
    daemon: &Arc<Daemon>,
    rt: &tokio::runtime::Handle,
    calls: &Arc<CallLog>,
) -> Vec<FunctionRef> {
    let r = Registrar {
        client,
        rt,
        daemon,
        calls,
    };
    vec![
        r.register(
            "sandbox::create",
            "Create a sandbox from a catalog image (`python` or `node`); `env` as [\"K=V\"] or {K: V}.",
            |d, req| async move { lifecycle::handle_create(&d, req).await },
        ),
        r.register(
            "sandbox::exec",
            "Run a command in a sandbox: `cmd` (shell-split, no shell), `cmd`+`args`, or `argv`; stdin is base64.",
            |d, req| async move { exec::handle_exec(&d, req).await },
        ),
        r.register(
            "sandbox::stop",
            "Stop a sandbox: kill its processes and discard its files.",
            |d, req| async move { lifecycle::handle_stop(&d, req).await },
        ),
        r.register(
            "sandbox::list",
            "List live sandboxes.",
            |d, _req: lifecycle::ListRequest| async move { Ok(lifecycle::handle_list(&d)) },
        ),
        r.register(
            "sandbox::run",
            "Create a sandbox, write the code (and files), run it with `lang`'s interpreter, stop it.",
            |d, req| async move { run::handle_run(&d, req).await },
        ),
        r.register(
            "sandbox::catalog::list",
            "List the images sandbox::create accepts.",
            |_d, _req: lifecycle::CatalogListRequest| async move {
                Ok(lifecycle::handle_catalog())
            },
        ),
        r.register(
            "sandbox::fs::write",
            "Write a file into a sandbox: `content` (UTF-8, or a data channel's reader ref) or `content_b64`; `parents`, `mode`.",
            |d, req| async move { fs_ops::handle_write(&d, req).await },
        ),
        r.register(
            "sandbox::fs::read",
            "Read a file from a sandbox: `content`, a data channel's reader ref carrying the bytes; `body` inline for UTF-8 files under 1 MiB; size, mode, mtime.",
            |d, req| async move { fs_ops::handle_read(&d, req).await },
        ),
        r.register(
            "sandbox::fs::mkdir",
            "Create a directory in a sandbox; `parents` like mkdir -p.",
            |d, req| async move { fs_ops::handle_mkdir(&d, req).await },
        ),
    ]
}
