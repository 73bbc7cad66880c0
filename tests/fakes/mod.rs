//! In-memory fakes of the worker's two outside edges, `sandbox::*`
//! ([`FakeSandbox`]) and the bus ([`FakeBus`]): the one pair the manager and
//! inventory tests and the inventory bench build a `Manager` over.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_code_runner::bus::{Bus, BusError, FunctionSpec, Handler, Routing, TriggerBinding};
use sandbox_code_runner::error::WorkerError;
use sandbox_code_runner::sandbox::{
    CreateParams, ExecOutput, ExecParams, ListedSandbox, SandboxApi, SandboxError,
};
use sandbox_code_runner::seal;
use serde_json::{json, Value};

type ExecFn = dyn Fn(&ExecParams) -> Result<ExecOutput, SandboxError> + Send + Sync;

/// A scripted `sandbox::*`: every VM exists until stopped (or reaped with
/// [`FakeSandbox::reap_all`]); each call is logged in [`FakeSandbox::ops`].
pub struct FakeSandbox {
    log: Mutex<Vec<String>>,
    pub live: Mutex<HashMap<String, Option<String>>>,
    next: AtomicUsize,
    /// What the next creates fail with, while set.
    pub create_error: Mutex<Option<SandboxError>>,
    /// While set, creates wait here until it is notified (each create
    /// waits for one `notify_one`); `creates_waiting` counts them.
    pub create_gate: Mutex<Option<Arc<tokio::sync::Notify>>>,
    pub creates_waiting: AtomicUsize,
    /// While set, execs (not lifelines) wait here until it is notified.
    pub exec_gate: Mutex<Option<Arc<tokio::sync::Notify>>>,
    /// What `list` fails with, while set.
    pub list_error: Mutex<Option<SandboxError>>,
    /// The most VMs alive at once (S400 past it), while set.
    pub capacity: Mutex<Option<usize>>,
    exec: Mutex<Arc<ExecFn>>,
    exec_time: Duration,
    logging: bool,
    in_flight: AtomicUsize,
    /// The most execs seen running at once.
    pub max_in_flight: AtomicUsize,
    /// A stop to hold until released: (sandbox id, entered, release).
    held_stop: Mutex<Option<HeldStop>>,
    /// Lifelines started: kept out of `ops`, whose order they do not share.
    lifelines: AtomicUsize,
    /// Lifelines end at once with exit 137, as if the run's code killed them.
    pub lifeline_killed: AtomicBool,
    /// Lifelines are refused with S003, as on a daemon with one exec slot.
    pub lifeline_refused: AtomicBool,
    /// VMs a stop has ended (their entries may linger until it returns).
    ended: Mutex<HashSet<String>>,
    vm_ended: tokio::sync::Notify,
    /// VMs a sealed exec came back from (`seal`): only these may get an
    /// exec without the seal in front.
    sealed: Mutex<HashSet<String>>,
    /// Execs that came with the seal in front.
    pub sealed_execs: AtomicUsize,
    /// The seal refuses, as in a VM whose mounts stay writable: exit 125
    /// and its words on stderr, nothing run.
    pub seal_refuses: AtomicBool,
    /// Itself, so a create runs on as the daemon's would when its caller
    /// stops waiting (a request sent on the bus is served).
    me: std::sync::Weak<FakeSandbox>,
}

type HeldStop = (String, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>);

pub fn ok_out(stdout: &str, code: i32) -> ExecOutput {
    ExecOutput {
        stdout: stdout.into(),
        stderr: String::new(),
        exit_code: Some(code),
        duration_ms: 3,
    }
}

/// Answers handler execs with a genuine frame carrying `value`.
pub fn frame_for(p: &ExecParams, kind: &str, body: &Value) -> ExecOutput {
    let stdin: Value =
        serde_json::from_slice(p.stdin.as_deref().unwrap_or_default()).unwrap_or(Value::Null);
    let secret = stdin["secret"].as_str().unwrap_or("").to_string();
    ok_out(
        &format!("print from handler\n\u{1e}SCR1 {secret} {kind} {body}\n"),
        0,
    )
}

pub fn is_invoke(p: &ExecParams) -> bool {
    p.env
        .get("SCR_WORKER_NAME")
        .is_some_and(|n| n != "sandbox-code-runner:run")
}

impl FakeSandbox {
    /// Execs take 5 ms, so that overlapping ones show in `max_in_flight`.
    pub fn new() -> Arc<FakeSandbox> {
        FakeSandbox::build(Duration::from_millis(5), true)
    }

    /// Execs take no time and no call is logged: a bench measuring the
    /// worker's own cost over millions of calls.
    pub fn bare() -> Arc<FakeSandbox> {
        FakeSandbox::build(Duration::ZERO, false)
    }

    fn build(exec_time: Duration, logging: bool) -> Arc<FakeSandbox> {
        Arc::new_cyclic(|me| FakeSandbox {
            me: me.clone(),
            log: Mutex::new(Vec::new()),
            live: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(1),
            create_error: Mutex::new(None),
            create_gate: Mutex::new(None),
            creates_waiting: AtomicUsize::new(0),
            exec_gate: Mutex::new(None),
            list_error: Mutex::new(None),
            capacity: Mutex::new(None),
            exec: Mutex::new(Arc::new(|p: &ExecParams| {
                if is_invoke(p) {
                    Ok(frame_for(p, "ok", &json!({"doubled": 42})))
                } else {
                    Ok(ok_out("4\n", 0))
                }
            })),
            exec_time,
            logging,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            held_stop: Mutex::new(None),
            lifelines: AtomicUsize::new(0),
            lifeline_killed: AtomicBool::new(false),
            lifeline_refused: AtomicBool::new(false),
            ended: Mutex::new(HashSet::new()),
            vm_ended: tokio::sync::Notify::new(),
            sealed: Mutex::new(HashSet::new()),
            sealed_execs: AtomicUsize::new(0),
            seal_refuses: AtomicBool::new(false),
        })
    }

    /// Holds the next stop of `id` until the second notify fires; the first
    /// fires once that stop has started.
    pub fn hold_next_stop(&self, id: &str) -> (Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        let (entered, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        *self.held_stop.lock().unwrap() = Some((id.into(), entered.clone(), release.clone()));
        (entered, release)
    }

    /// Execs (not lifelines) running now.
    pub fn execs_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The live VMs' ids.
    pub fn live_ids(&self) -> Vec<String> {
        self.live.lock().unwrap().keys().cloned().collect()
    }

    pub fn on_exec(
        &self,
        f: impl Fn(&ExecParams) -> Result<ExecOutput, SandboxError> + Send + Sync + 'static,
    ) {
        *self.exec.lock().unwrap() = Arc::new(f);
    }

    fn record(&self, op: String) {
        if self.logging {
            self.log.lock().unwrap().push(op);
        }
    }

    pub fn ops(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn live(&self) -> usize {
        self.live.lock().unwrap().len()
    }

    pub fn reap_all(&self) {
        self.live.lock().unwrap().clear();
        self.vm_ended.notify_waiters();
    }

    /// A one-shot VM's lifeline (`sleep`): in flight until a stop ends the
    /// VM, then failed as the daemon fails an exec whose VM disconnected.
    /// Counted in [`FakeSandbox::lifelines`], not in `ops` or
    /// `max_in_flight`: it runs beside the worker's calls, in no order.
    /// What the VM does with one exec (the seal taken off).
    async fn exec_in_vm(&self, id: &str, p: ExecParams) -> Result<ExecOutput, SandboxError> {
        if p.argv.first().is_some_and(|a| a == "sleep") {
            return self.lifeline(id).await;
        }
        self.record("exec".into());
        self.check_live(id)?;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        let gate = self.exec_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.notified().await;
        }
        // The sleep is the behaviour under test: an exec takes time, so
        // overlapping execs would be seen by `max_in_flight`.
        if !self.exec_time.is_zero() {
            tokio::time::sleep(self.exec_time).await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let f = self.exec.lock().unwrap().clone();
        f(&p)
    }

    /// What the daemon does with a create, whoever still waits for it.
    async fn create_in_daemon(&self, p: CreateParams) -> Result<String, SandboxError> {
        self.record(format!("create {}", p.image));
        let gate = self.create_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            self.creates_waiting.fetch_add(1, Ordering::SeqCst);
            gate.notified().await;
            self.creates_waiting.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(e) = self.create_error.lock().unwrap().clone() {
            return Err(e);
        }
        if let Some(cap) = *self.capacity.lock().unwrap() {
            if self.live() >= cap {
                return Err(daemon(
                    "S400",
                    &format!("resource limit exceeded: max_concurrent_sandboxes ({cap}) reached"),
                ));
            }
        }
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let id = format!("00000000-0000-4000-8000-{n:012}");
        self.live.lock().unwrap().insert(id.clone(), Some(p.name));
        Ok(id)
    }

    async fn lifeline(&self, id: &str) -> Result<ExecOutput, SandboxError> {
        self.lifelines.fetch_add(1, Ordering::SeqCst);
        self.check_live(id)?;
        if self.lifeline_refused.load(Ordering::SeqCst) {
            return Err(daemon(
                "S003",
                &format!(
                    "sandbox {id} is at its exec concurrency cap (max_concurrent_exec_per_sandbox)"
                ),
            ));
        }
        if self.lifeline_killed.load(Ordering::SeqCst) {
            return Ok(ok_out("", 137));
        }
        loop {
            let ended = self.vm_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.ended.lock().unwrap().contains(id)
                || !self.live.lock().unwrap().contains_key(id)
            {
                return Err(daemon(
                    "S300",
                    "VM boot failed: shell run: session terminated: vm disconnected mid-run",
                ));
            }
            ended.await;
        }
    }

    /// How many creates were asked for (refused ones included).
    pub fn creates(&self) -> usize {
        self.ops()
            .iter()
            .filter(|o| o.starts_with("create"))
            .count()
    }

    /// How many lifelines were started.
    pub fn lifelines(&self) -> usize {
        self.lifelines.load(Ordering::SeqCst)
    }

    fn check_live(&self, id: &str) -> Result<(), SandboxError> {
        if self.live.lock().unwrap().contains_key(id) {
            Ok(())
        } else {
            Err(daemon("S002", &format!("sandbox not found: {id}")))
        }
    }
}

pub fn daemon(code: &str, message: &str) -> SandboxError {
    SandboxError::Daemon {
        code: code.into(),
        message: message.into(),
        retryable: false,
    }
}

#[async_trait::async_trait]
impl SandboxApi for FakeSandbox {
    async fn create(&self, p: CreateParams) -> Result<String, SandboxError> {
        let me = self.me.upgrade().expect("the fake lives while called");
        tokio::spawn(async move { me.create_in_daemon(p).await })
            .await
            .expect("the fake's create does not panic")
    }

    async fn exec(&self, id: &str, mut p: ExecParams) -> Result<ExecOutput, SandboxError> {
        // The seal runs its command in place: the fake answers for that.
        let behind_seal = match seal::unsealed(&p.argv) {
            Some(command) => {
                p.argv = command.to_vec();
                self.sealed_execs.fetch_add(1, Ordering::SeqCst);
                true
            }
            None => false,
        };
        if behind_seal && self.seal_refuses.load(Ordering::SeqCst) {
            return Ok(ExecOutput {
                stderr:
                    "sandbox-code-runner: cannot make the image read-only at /home; no code ran\n"
                        .into(),
                exit_code: Some(seal::REFUSED),
                ..ExecOutput::default()
            });
        }
        assert!(
            behind_seal || self.sealed.lock().unwrap().contains(id),
            "an exec ran bare in a VM no sealed exec had come back from: {:?}",
            p.argv.first()
        );
        let out = self.exec_in_vm(id, p).await;
        if behind_seal
            && out
                .as_ref()
                .is_ok_and(|o| o.exit_code.is_some_and(|c| c != seal::REFUSED))
        {
            self.sealed.lock().unwrap().insert(id.to_string());
        }
        out
    }

    async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        self.record("stop".into());
        let held = {
            let mut h = self.held_stop.lock().unwrap();
            match h.as_ref() {
                Some((held_id, _, _)) if held_id == id => h.take(),
                _ => None,
            }
        };
        self.check_live(id)?;
        // The SIGTERM ends the VM at once; the entry goes after the grace
        // (here: while the stop is held).
        self.ended.lock().unwrap().insert(id.to_string());
        self.vm_ended.notify_waiters();
        if let Some((_, entered, release)) = held {
            entered.notify_one();
            release.notified().await;
        }
        self.check_live(id)?;
        self.live.lock().unwrap().remove(id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError> {
        self.record("list".into());
        if let Some(e) = self.list_error.lock().unwrap().clone() {
            return Err(e);
        }
        Ok(self
            .live
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| ListedSandbox {
                sandbox_id: k.clone(),
                name: v.clone(),
            })
            .collect())
    }

    async fn write_file(&self, id: &str, path: &str, _content: &str) -> Result<(), SandboxError> {
        self.record(format!("write {path}"));
        self.check_live(id)
    }
}

/// A bus that records publications and answers `engine::functions::info`
/// (the only function the manager calls on it).
#[derive(Default)]
pub struct FakeBus {
    published: Mutex<HashMap<String, Handler>>,
    /// Ids some other worker serves.
    pub taken: Mutex<HashSet<String>>,
    /// Calls forwarded for someone else (the guest middleware), in order.
    pub forwarded: Mutex<Vec<(String, Routing)>>,
}

impl Bus for FakeBus {
    fn call<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        Box::pin(async move {
            assert_eq!(function_id, "engine::functions::info");
            let id = payload["function_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let known = self.taken.lock().unwrap().contains(&id)
                || self.published.lock().unwrap().contains_key(&id);
            if known {
                Ok(json!({"function_id": id}))
            } else {
                Err(BusError::new(
                    "NOT_FOUND",
                    format!("Function '{id}' is not registered."),
                ))
            }
        })
    }

    /// Routes to a published handler, as the engine would; the answer's
    /// error keeps its wire code. An unknown id is `function_not_found`.
    fn forward<'a>(
        &'a self,
        function_id: &'a str,
        payload: Value,
        routing: Routing,
        _namespace: Option<&'a str>,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Value, BusError>> + Send + 'a>> {
        self.forwarded
            .lock()
            .unwrap()
            .push((function_id.to_string(), routing));
        let handler = self.published.lock().unwrap().get(function_id).cloned();
        Box::pin(async move {
            match handler {
                Some(h) => h(payload).await.map_err(|e| {
                    let (code, message) = e.to_wire();
                    BusError::new(code, message)
                }),
                None => Err(BusError::new(
                    "function_not_found",
                    format!("Function {function_id} not found in namespace default."),
                )),
            }
        })
    }

    fn publish(&self, spec: FunctionSpec, handler: Handler) {
        self.published.lock().unwrap().insert(spec.id, handler);
    }

    fn unpublish(&self, function_id: &str) {
        self.published.lock().unwrap().remove(function_id);
    }

    fn bind(
        &self,
        trigger_type: &str,
        function_id: &str,
        _config: Value,
    ) -> Result<TriggerBinding, BusError> {
        Ok(TriggerBinding::detached(trigger_type, function_id))
    }

    fn unbind(&self, _binding: TriggerBinding) {}
}

impl FakeBus {
    pub fn ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.published.lock().unwrap().keys().cloned().collect();
        v.sort();
        v
    }

    /// The handler published under `id` (panics when there is none).
    pub fn handler(&self, id: &str) -> Handler {
        self.published.lock().unwrap()[id].clone()
    }

    pub async fn call_published(&self, id: &str, payload: Value) -> Result<Value, WorkerError> {
        let h = self
            .published
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .expect("published");
        h(payload).await
    }
}
