//! End-to-end harness: the hermetic bench in-process, the worker binary as a
//! real child process, and an SDK client calling it through the engine.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use code_runner_conformance::standin::sandbox_double::SandboxLimits;
use code_runner_conformance::standin::stack::{Stack, StackOptions};
use code_runner_conformance::suite::case::UrlVia;
use code_runner_conformance::suite::env::{WorkerCommand, WorkerProcess};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::Value;

/// A failed call as the caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallError {
    pub code: String,
    pub message: String,
}

pub struct Harness {
    pub bench: Stack,
    pub client: IIIClient,
    worker: Option<WorkerProcess>,
    config: String,
    dir: PathBuf,
}

pub use code_runner_conformance::standin::wait::until as wait_for;

/// Reports a test skipped, with why, on stderr; where CI asks for the
/// root-only tests (`SCR_REQUIRE_ROOT_TESTS=1`, set by `.ci/run` as root),
/// a skip is a failure instead, so they cannot pass by not running.
pub fn skip(why: &str) {
    let required = std::env::var("SCR_REQUIRE_ROOT_TESTS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "SCR_REQUIRE_ROOT_TESTS=1, but this test would skip: {why}"
    );
    eprintln!("skipped: {why}");
}

pub fn test_limits() -> SandboxLimits {
    SandboxLimits {
        stop_grace_ms: 0,
        reaper_interval_ms: 200,
        ..SandboxLimits::default()
    }
}

impl Harness {
    /// Starts a bench and a worker with `config` (YAML).
    pub async fn start(config: &str) -> Harness {
        Harness::start_with(config, test_limits()).await
    }

    pub async fn start_with(config: &str, limits: SandboxLimits) -> Harness {
        Harness::start_opts(config, limits, false).await
    }

    /// With the configuration-worker double, persisting under `<dir>/configuration`.
    pub async fn start_with_configuration(config: &str) -> Harness {
        Harness::start_opts(config, test_limits(), true).await
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    async fn start_opts(config: &str, limits: SandboxLimits, configuration: bool) -> Harness {
        let dir = std::env::temp_dir().join(format!("scr-e2e-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let bench = Stack::start(StackOptions {
            port: 0,
            engine: None,
            limits,
            configuration_dir: configuration.then(|| dir.join("configuration")),
            without_sandbox: false,
        })
        .await
        .expect("bench starts");
        // Exact leak accounting needs an empty pool unless a test asks for one.
        let mut config = if config.contains("warm_pool") {
            config.to_string()
        } else {
            format!("warm_pool: 0\n{config}")
        };
        // Guests take the secure path: the bench's guest listener.
        if let (false, Some(g)) = (config.contains("guest_url"), bench.guest_url()) {
            config = format!("guest_url: {g}\n{config}");
        }
        let client = code_runner_conformance::standin::client::connect(&bench.url(), "e2e-caller")
            .await
            .expect("client connects");
        let mut h = Harness {
            bench,
            client,
            worker: None,
            config,
            dir,
        };
        h.spawn_worker().await;
        h
    }

    /// Starts the worker binary (again, appending to the same log) and
    /// waits until its functions are visible.
    pub async fn spawn_worker(&mut self) {
        match &mut self.worker {
            Some(w) => w.respawn().expect("worker starts"),
            None => {
                let w = WorkerProcess::spawn_with_env(
                    &WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner")),
                    &self.bench.url(),
                    UrlVia::Flag,
                    Some(&self.config),
                    None,
                    &[(
                        "RUST_LOG",
                        "debug,iii_sdk=info,tungstenite=info,tokio_tungstenite=info",
                    )],
                )
                .expect("worker starts");
                self.worker = Some(w);
            }
        }
        let engine = self.bench.engine().expect("stand-in engine");
        let ready = wait_for(Duration::from_secs(30), || async {
            engine
                .function_ids("default")
                .iter()
                .any(|f| f == "sandbox-code-runner::teardown")
        })
        .await;
        assert!(
            ready,
            "worker published its functions; log:\n{}",
            self.log()
        );
    }

    /// Kills the worker without letting it clean up (a crash).
    pub async fn crash_worker(&mut self) {
        if let Some(w) = self.worker.as_mut() {
            w.kill().await;
        }
        let engine = self.bench.engine().expect("stand-in engine");
        let gone = wait_for(Duration::from_secs(10), || async {
            !engine
                .function_ids("default")
                .iter()
                .any(|f| f == "sandbox-code-runner::run")
        })
        .await;
        assert!(gone, "a dead worker's functions vanish");
    }

    /// SIGTERMs the worker and waits for it to exit.
    pub async fn stop_worker(&mut self) -> std::process::ExitStatus {
        let w = self.worker.as_mut().expect("a worker");
        assert!(w.is_running(), "a running worker");
        w.stop().await.expect("worker exits after SIGTERM")
    }

    pub async fn call(&self, function_id: &str, payload: Value) -> Result<Value, CallError> {
        self.call_with(function_id, payload, 120_000).await
    }

    pub async fn call_with(
        &self,
        function_id: &str,
        payload: Value,
        timeout_ms: u64,
    ) -> Result<Value, CallError> {
        self.client
            .trigger(TriggerRequest {
                function_id: function_id.to_string(),
                payload,
                action: None,
                timeout_ms: Some(timeout_ms),
            })
            .await
            .map_err(|e| match e {
                iii_sdk::Error::Remote { code, message, .. } => CallError { code, message },
                other => CallError {
                    code: "client".into(),
                    message: other.to_string(),
                },
            })
    }

    pub async fn run(&self, payload: Value) -> Result<Value, CallError> {
        self.call("sandbox-code-runner::run", payload).await
    }

    /// A kept python run of `print(1)`: its `runtime_id`.
    pub async fn kept(&self) -> String {
        let out = self
            .run(serde_json::json!({"lang": "python", "code": "print(1)", "keep": true}))
            .await
            .expect("a kept run");
        out["runtime_id"]
            .as_str()
            .expect("a runtime_id")
            .to_string()
    }

    /// Live sandboxes in the daemon double.
    pub fn live_sandboxes(&self) -> usize {
        self.bench
            .sandbox()
            .expect("the harness runs the daemon double")
            .live()
            .len()
    }

    pub fn log(&self) -> String {
        self.worker
            .as_ref()
            .map(WorkerProcess::log)
            .unwrap_or_default()
    }

    /// Ends the test: no sandbox beyond `kept` is left, and no runtime id
    /// reached the worker's log.
    pub async fn finish(mut self, kept: usize) {
        // A one-shot answers once its VM is gone; the daemon's stop (its
        // entry's removal) may still be finishing.
        wait_for(Duration::from_secs(20), || async {
            self.live_sandboxes() <= kept
        })
        .await;
        let live = self.live_sandboxes();
        assert_eq!(live, kept, "sandboxes left behind; log:\n{}", self.log());
        if self.worker.as_ref().is_some_and(WorkerProcess::is_running) {
            let status = self.stop_worker().await;
            assert!(status.success(), "worker exits cleanly on SIGTERM");
        }
        assert_eq!(
            self.live_sandboxes(),
            0,
            "SIGTERM stops every VM the worker owns"
        );
        assert_no_runtime_ids(&self.log());
        self.client.shutdown_async().await;
        self.bench.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// No `rt-<uuid>` in `text`.
pub fn assert_no_runtime_ids(text: &str) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("rt-") {
        let at = i + pos + 3;
        let candidate = &bytes[at..(at + 36).min(bytes.len())];
        let is_uuid = candidate.len() == 36
            && candidate.iter().enumerate().all(|(k, c)| match k {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            });
        assert!(
            !is_uuid,
            "a runtime id leaked into the log near: {}",
            &text[at.saturating_sub(40)..(at + 40).min(text.len())]
        );
        i = at;
    }
}

/// A stand-in for the workers that own trigger types the worker binds to
/// (the harness's pre-generate hook, the console's asset slots): it declares
/// the types and records the bindings the engine hands it, exactly as a real
/// provider sees them.
/// Live bindings: (binding id, trigger type, function id, config).
type Bindings = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String, Value)>>>;

pub struct TriggerProvider {
    client: IIIClient,
    active: Bindings,
}

struct Recorder {
    trigger_type: String,
    active: Bindings,
}

#[async_trait::async_trait]
impl iii_sdk::trigger::TriggerHandler for Recorder {
    async fn register_trigger(
        &self,
        c: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        self.active.lock().unwrap().push((
            c.id,
            self.trigger_type.clone(),
            c.function_id,
            c.config,
        ));
        Ok(())
    }

    async fn unregister_trigger(
        &self,
        c: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        self.active.lock().unwrap().retain(|(id, ..)| *id != c.id);
        Ok(())
    }
}

impl TriggerProvider {
    pub async fn start(url: &str, types: &[&str]) -> TriggerProvider {
        let client = code_runner_conformance::standin::client::connect(url, "trigger-provider")
            .await
            .expect("provider connects");
        let active = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        for t in types {
            #[allow(deprecated)] // the engine under test speaks trigger types
            client.register_trigger_type(iii_sdk::RegisterTriggerType::new(
                *t,
                "test provider",
                Recorder {
                    trigger_type: t.to_string(),
                    active: active.clone(),
                },
            ));
        }
        TriggerProvider { client, active }
    }

    /// The configs of the live bindings of `function_id` to `trigger_type`.
    pub fn bindings(&self, trigger_type: &str, function_id: &str) -> Vec<Value> {
        self.active
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, t, f, _)| t == trigger_type && f == function_id)
            .map(|(.., c)| c.clone())
            .collect()
    }

    pub async fn shutdown(self) {
        self.client.shutdown_async().await;
    }
}
