//! The runtime manager: runtime records, namespace bindings, one exec at a
//! time per runtime, lazy expiry, and the accounting of every VM this worker
//! created (so shutdown and the orphan sweep are complete).
//!
//! It speaks typed requests and typed errors; JSON and the wire envelope
//! stay in `functions`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bus::{Bus, FunctionSpec};
use crate::config::{Config, OneshotStop};
use crate::error::{redact_uuids, WorkerError};
use crate::guest::{self, Frame, InvokeMode};
use crate::guest_access::{GuestTokens, TokenLease, TOKEN_ENV};
use crate::ids::{FunctionId, Lang, Namespace, RuntimeId};
use crate::pool::WarmPool;
use crate::sandbox::{
    charge, charge_wait, charged, metered, CreateParams, ExecOutput, ExecParams, OpTotals,
    SandboxApi, SandboxError, INSTALL_HINT,
};
use crate::wire::{RunResponse, TeardownResponse};

mod inventory;
mod shutdown;
use crate::events::{EventKind, Hub};
pub use inventory::{Inventory, Liveness, PoolEntry, RuntimeEntry};
pub use shutdown::ShutdownReport;

/// How often the warm pool is topped up without traffic.
const POOL_MAINTENANCE: Duration = Duration::from_secs(2);

/// Largest `code` or `source` accepted.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// Largest `description` accepted.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Functions one namespace runtime may publish.
pub const MAX_FUNCTIONS_PER_RUNTIME: usize = 64;

/// Whether the guest SDK is in a runtime yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SdkState {
    Absent,
    /// Planted or installed (or tried and failed: the wrapper then raises a
    /// clear "not installed" error on first use, and we do not retry per call).
    Prepared,
}

/// What only the holder of a runtime's exec slot may touch.
struct Slot {
    sdk: SdkState,
    /// No tenant code has run in the VM yet: what it installs may be archived.
    pristine: bool,
}

/// One VM that outlives a call: a kept run's, or a namespace's.
pub struct Runtime {
    id: RuntimeId,
    sandbox_id: String,
    lang: Lang,
    namespace: Option<Namespace>,
    /// One exec at a time: the VM's single slot.
    slot: tokio::sync::Mutex<Slot>,
    /// Published function id → module path inside the VM.
    functions: Mutex<HashMap<String, String>>,
    /// Its guests' token on the guest listener; revoked when it is forgotten.
    token: Mutex<Option<TokenLease>>,
    /// What the inventory shows: handle, created, last used, executions.
    meta: inventory::Meta,
}

impl Runtime {
    fn new(
        id: RuntimeId,
        sandbox_id: String,
        lang: Lang,
        namespace: Option<Namespace>,
        sdk: SdkState,
        token: Option<TokenLease>,
    ) -> Arc<Runtime> {
        // A namespace VM runs tenant code only once a handler is checked;
        // a kept VM already ran its first run.
        let pristine = namespace.is_some();
        Arc::new(Runtime {
            id,
            sandbox_id,
            lang,
            namespace,
            slot: tokio::sync::Mutex::new(Slot { sdk, pristine }),
            functions: Mutex::new(HashMap::new()),
            token: Mutex::new(token),
            meta: inventory::Meta::new(),
        })
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.id)
            .field("lang", &self.lang)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    runtimes: HashMap<RuntimeId, Arc<Runtime>>,
    namespaces: HashMap<(Namespace, Lang), RuntimeId>,
    /// Published function id → the runtime serving it.
    functions: HashMap<String, RuntimeId>,
    /// Function ids mid-registration, so two registrations cannot both win.
    reserved: HashSet<String>,
    /// VMs of calls in flight that no record holds yet (one-shot and keep runs).
    transient: HashSet<String>,
}

/// Identity of this worker's VMs: `sandbox-code-runner:<owner>:<instance>`.
/// `owner` is stable across restarts, `instance` is per process.
#[derive(Debug, Clone)]
pub struct VmNaming {
    pub owner: String,
    pub instance: String,
}

impl VmNaming {
    pub fn new(owner: &str) -> VmNaming {
        VmNaming {
            owner: owner.to_string(),
            instance: format!("{:08x}", rand::random::<u32>()),
        }
    }

    fn prefix(&self) -> String {
        format!("sandbox-code-runner:{}:", self.owner)
    }

    pub fn vm_name(&self) -> String {
        format!("{}{}", self.prefix(), self.instance)
    }

    /// A VM a previous process of the same owner left behind.
    pub fn is_orphan(&self, name: &str) -> bool {
        name.starts_with(&self.prefix()) && name != self.vm_name()
    }
}

/// Serializes the creation of one namespace runtime.
type NamespaceGate = Arc<tokio::sync::Mutex<()>>;

/// The manager. Cheap to share: everything lives behind `Arc`.
pub struct Manager {
    sandbox: Arc<dyn SandboxApi>,
    bus: Arc<dyn Bus>,
    config: Config,
    naming: VmNaming,
    guest_engine_url: String,
    state: Mutex<State>,
    namespace_locks: Mutex<HashMap<(Namespace, Lang), NamespaceGate>>,
    seq: AtomicU64,
    pool: WarmPool,
    stats: Stats,
    /// Tokens of guests on the guest listener (`guest_url`).
    tokens: Arc<GuestTokens>,
    /// Lifecycle subscribers (`sandbox-code-runner::event`).
    events: Arc<Hub>,
    python_sdk: crate::python_sdk::PySdkCache,
    me: Weak<Manager>,
}

/// Per-operation cost totals: what each kind of operation spent on the daemon.
#[derive(Default)]
pub struct Stats {
    pub run: Arc<OpTotals>,
    pub register_function: Arc<OpTotals>,
    pub teardown: Arc<OpTotals>,
    pub handler_call: Arc<OpTotals>,
    /// Warm-pool refills, which no caller waits for.
    pub pool: Arc<OpTotals>,
}

impl Stats {
    /// `{op: {ops, sandbox_calls, bytes_planted}}`.
    pub fn to_json(&self) -> Value {
        let one = |t: &OpTotals| {
            let (ops, calls, bytes) = t.snapshot();
            serde_json::json!({
                "ops": ops,
                "sandbox_calls": calls,
                "bytes_planted": bytes,
                "worker_added_us_mean": (t.added_us_mean() * 10.0).round() / 10.0,
                "total_ns": t.total_nanos.load(Ordering::Relaxed),
                "sandbox_ns": t.sandbox_nanos.load(Ordering::Relaxed),
                "sdk_pip_installs": t.sdk_pip_installs.load(Ordering::Relaxed),
                "sdk_install_ns": t.sdk_install_nanos.load(Ordering::Relaxed),
            })
        };
        serde_json::json!({
            "run": one(&self.run),
            "register_function": one(&self.register_function),
            "teardown": one(&self.teardown),
            "handler_call": one(&self.handler_call),
            "pool": one(&self.pool),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An infrastructure failure, with the daemon's S-code kept and sandbox ids
/// removed.
pub fn infra_error(e: SandboxError, budget_ms: u64) -> WorkerError {
    match e {
        SandboxError::NotInstalled => WorkerError::Engine(INSTALL_HINT.to_string()),
        SandboxError::Daemon { code, .. } if code == "S200" => {
            WorkerError::Timeout(format!("exceeded its {budget_ms} ms budget"))
        }
        SandboxError::Daemon { code, message, .. } if code == "S400" => {
            WorkerError::Capacity(format!("iii-sandbox {code}: {}", redact_uuids(&message)))
        }
        SandboxError::Daemon { code, message, .. } => {
            WorkerError::Engine(format!("iii-sandbox {code}: {}", redact_uuids(&message)))
        }
        SandboxError::Bus(b) => WorkerError::Engine(format!(
            "bus error {}: {}",
            b.code,
            redact_uuids(&b.message)
        )),
    }
}

/// Whether the daemon no longer knows the VM (stopped or reaped).
fn vm_gone(e: &SandboxError) -> bool {
    matches!(e.s_code(), Some("S002") | Some("S004"))
}

const EXPIRED_RUN: &str =
    "the runtime's VM was reaped after its idle TTL; start a new one with keep: true";
const EXPIRED_FUNCTION: &str =
    "the namespace runtime's VM was reaped after its idle TTL; its functions are unregistered; register again to boot a fresh one";

impl Manager {
    pub fn new(
        sandbox: Arc<dyn SandboxApi>,
        bus: Arc<dyn Bus>,
        config: Config,
        naming: VmNaming,
        guest_engine_url: String,
    ) -> Arc<Manager> {
        let pool = WarmPool::new(config.warm_pool);
        let events = Arc::new(Hub::new(&bus));
        Arc::new_cyclic(|me| Manager {
            pool,
            events,
            stats: Stats::default(),
            python_sdk: Default::default(),
            sandbox,
            bus,
            config,
            naming,
            guest_engine_url,
            state: Mutex::new(State::default()),
            namespace_locks: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            tokens: GuestTokens::new(),
            me: me.clone(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The guest tokens: what `guest-auth` and `guest-register` consult.
    pub fn guest_tokens(&self) -> &Arc<GuestTokens> {
        &self.tokens
    }

    /// A fresh guest token, when guests connect through a guest listener.
    pub fn mint_guest_token(&self, namespace: Option<&Namespace>) -> Option<TokenLease> {
        self.config
            .guest_url
            .as_ref()
            .map(|_| self.tokens.mint(namespace.map(Namespace::as_str)))
    }

    /// `p` with the guest's token in its env, when it has one.
    fn with_token(mut p: ExecParams, token: Option<&TokenLease>) -> ExecParams {
        if let Some(t) = token {
            p.env.insert(TOKEN_ENV.to_string(), t.expose().to_string());
        }
        p
    }

    /// `p` with `rt`'s guest token in its env.
    fn for_runtime(rt: &Runtime, p: ExecParams) -> ExecParams {
        Manager::with_token(p, lock(&rt.token).as_ref())
    }

    pub fn sandbox(&self) -> &Arc<dyn SandboxApi> {
        &self.sandbox
    }

    /// What each kind of operation cost.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The python SDK archive cache.
    pub fn python_sdk(&self) -> &crate::python_sdk::PySdkCache {
        &self.python_sdk
    }

    /// Ready warm VMs of `lang`.
    pub fn pool_ready(&self, lang: Lang) -> usize {
        self.pool.ready(lang)
    }

    /// Number of live runtime records (for tests and metrics).
    pub fn runtime_count(&self) -> usize {
        lock(&self.state).runtimes.len()
    }

    // ---- VMs ----

    fn create_params(&self, lang: Lang) -> CreateParams {
        CreateParams {
            image: lang.image().to_string(),
            name: self.naming.vm_name(),
            idle_timeout_secs: self.config.idle_ttl_secs,
            // The guest's `iii` rides the sandbox network gateway.
            network: true,
            env: [(
                "III_URL".to_string(),
                self.config
                    .guest_url
                    .clone()
                    .unwrap_or_else(|| self.guest_engine_url.clone()),
            )]
            .into(),
        }
    }

    /// Every `sandbox::*` call goes through here: it is charged to the
    /// current operation, and the time it takes counts as the daemon's.
    async fn on_daemon<T>(&self, bytes_planted: u64, call: impl Future<Output = T>) -> T {
        charge(1, bytes_planted);
        let start = Instant::now();
        let out = call.await;
        charge_wait(start.elapsed());
        out
    }

    /// A fresh VM, held in `transient` until a record takes it or it stops.
    async fn create_vm(&self, lang: Lang) -> Result<String, SandboxError> {
        let id = self
            .on_daemon(0, self.sandbox.create(self.create_params(lang)))
            .await?;
        lock(&self.state).transient.insert(id.clone());
        Ok(id)
    }

    /// A VM for one tenant: a warm one if the pool has it, else a fresh one.
    /// Capacity pressure drains the pool before the caller sees `capacity`.
    async fn acquire_vm(&self, lang: Lang) -> Result<(String, bool), SandboxError> {
        let taken = self.pool.take(lang);
        self.refill(lang);
        if let Some(id) = taken {
            lock(&self.state).transient.insert(id.clone());
            return Ok((id, true));
        }
        match self.create_vm(lang).await {
            Err(e) if e.s_code() == Some("S400") => {
                if self.drain_pool().await == 0 {
                    return Err(e);
                }
                self.create_vm(lang).await.map(|id| (id, false))
            }
            other => other.map(|id| (id, false)),
        }
    }

    /// Tops the pool of `lang` up in the background.
    fn refill(&self, lang: Lang) {
        let missing = self.pool.reserve(lang);
        let Some(me) = self.me.upgrade() else { return };
        for _ in 0..missing {
            let me = me.clone();
            let totals = self.stats.pool.clone();
            tokio::spawn(charged(totals, async move {
                let warmed = me.warm_one(lang).await;
                if let Some(back) = me.pool.arrive(lang, warmed) {
                    me.stop_vm(&back).await;
                }
            }));
        }
    }

    /// Boots one pooled VM: create, then one cheap exec that pays the boot.
    async fn warm_one(&self, lang: Lang) -> Option<String> {
        let created = self
            .on_daemon(0, self.sandbox.create(self.create_params(lang)))
            .await;
        let id = match created {
            Ok(id) => id,
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: create failed");
                return None;
            }
        };
        let warm = ExecParams {
            argv: vec!["true".into()],
            timeout_ms: 60_000,
            ..ExecParams::default()
        };
        match self.exec(&id, warm).await {
            Ok(_) => Some(id),
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: warm-up exec failed");
                lock(&self.state).transient.insert(id.clone());
                self.stop_vm(&id).await;
                None
            }
        }
    }

    /// Stops every ready pooled VM; returns how many.
    async fn drain_pool(&self) -> usize {
        let ids = self.pool.drain();
        let n = ids.len();
        lock(&self.state).transient.extend(ids.iter().cloned());
        futures_util::future::join_all(ids.iter().map(|id| self.stop_vm(id))).await;
        n
    }

    /// Fills the pool at boot, and keeps it topped up: a refill that failed
    /// (capacity, a daemon not yet there) is retried by this loop, and a
    /// pool with no traffic still recovers.
    pub fn start_pool(&self) {
        if self.config.warm_pool == 0 {
            return;
        }
        self.refill(Lang::Node);
        self.refill(Lang::Python);
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POOL_MAINTENANCE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(m) = me.upgrade() else { return };
                if m.pool.is_closed() {
                    return;
                }
                m.refill(Lang::Node);
                m.refill(Lang::Python);
            }
        });
    }

    /// Stops a VM and forgets it. A VM the daemon already dropped is fine.
    async fn stop_vm(&self, sandbox_id: &str) {
        match self.on_daemon(0, self.sandbox.stop(sandbox_id)).await {
            Ok(()) => {}
            Err(e) if vm_gone(&e) => {}
            Err(e) => tracing::warn!(error = %redact_uuids(&e.to_string()), "stopping a VM failed"),
        }
        lock(&self.state).transient.remove(sandbox_id);
    }

    /// The stop of a one-shot VM: before the response (default), or after it.
    async fn stop_oneshot(&self, sandbox_id: String) {
        match (self.config.oneshot_stop, self.me.upgrade()) {
            (OneshotStop::Background, Some(me)) => {
                // The stop is the run's cost in calls, not in the caller's wait.
                charge(1, 0);
                tokio::spawn(async move { me.stop_vm(&sandbox_id).await });
            }
            _ => self.stop_vm(&sandbox_id).await,
        }
    }

    pub(crate) async fn exec(
        &self,
        sandbox_id: &str,
        p: ExecParams,
    ) -> Result<ExecOutput, SandboxError> {
        self.on_daemon(0, self.sandbox.exec(sandbox_id, p)).await
    }

    pub(crate) async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), SandboxError> {
        self.on_daemon(
            content.len() as u64,
            self.sandbox.write_file(sandbox_id, path, content),
        )
        .await
    }

    /// Makes the guest SDK available, once per VM, for code that names `iii`.
    /// A failure is not the caller's: the run goes on and `iii` explains.
    /// `pristine`: no tenant code ran in the VM yet.
    async fn prepare_sdk(
        &self,
        sandbox_id: &str,
        lang: Lang,
        pristine: bool,
    ) -> Result<(), SandboxError> {
        match lang {
            Lang::Node => {
                let r = self
                    .write_file(sandbox_id, guest::NODE_SDK_PATH, guest::NODE_SDK_BUNDLE)
                    .await;
                match r {
                    Err(e) if vm_gone(&e) => return Err(e),
                    Err(e) => {
                        tracing::warn!(error = %redact_uuids(&e.to_string()), "planting the node SDK failed")
                    }
                    Ok(()) => {}
                }
            }
            Lang::Python => self.prepare_python_sdk(sandbox_id, pristine).await?,
        }
        Ok(())
    }

    fn response(&self, out: ExecOutput, runtime_id: Option<String>) -> RunResponse {
        let cap = self.config.max_stream_bytes;
        RunResponse {
            stdout: guest::cap_stream(&out.stdout, cap, "stdout"),
            stderr: guest::cap_stream(&out.stderr, cap, "stderr"),
            exit_code: out.exit_code.map(i64::from).unwrap_or(-1),
            success: out.exit_code == Some(0),
            duration_ms: out.duration_ms,
            runtime_id,
        }
    }

    // ---- run ----

    /// `run` without a runtime: one-shot, or keep.
    pub async fn run_fresh(
        &self,
        lang: Lang,
        code: &str,
        keep: bool,
        timeout_ms: u64,
    ) -> Result<RunResponse, WorkerError> {
        let uses_iii = guest::names_iii(code);
        // One token per run; a kept run's becomes its runtime's.
        let token = self.mint_guest_token(None);
        let mut attempt = 0;
        let (sandbox_id, out) = loop {
            attempt += 1;
            let (sandbox_id, pooled) = self
                .acquire_vm(lang)
                .await
                .map_err(|e| infra_error(e, timeout_ms))?;
            let outcome = async {
                if uses_iii {
                    self.prepare_sdk(&sandbox_id, lang, true).await?;
                }
                self.exec(
                    &sandbox_id,
                    Manager::with_token(guest::run_exec(lang, code, timeout_ms), token.as_ref()),
                )
                .await
            }
            .await;
            match outcome {
                Ok(out) => break (sandbox_id, out),
                // A pooled VM reaped while it waited is replaced silently.
                Err(e) if pooled && vm_gone(&e) && attempt == 1 => {
                    lock(&self.state).transient.remove(&sandbox_id);
                    continue;
                }
                Err(e) => {
                    self.stop_vm(&sandbox_id).await;
                    return Err(infra_error(e, timeout_ms));
                }
            }
        };
        if keep && out.exit_code == Some(0) {
            let id = RuntimeId::generate();
            let sdk = if uses_iii {
                SdkState::Prepared
            } else {
                SdkState::Absent
            };
            let rt = Runtime::new(id.clone(), sandbox_id.clone(), lang, None, sdk, token);
            rt.meta.used(Duration::from_millis(out.duration_ms));
            {
                let mut st = lock(&self.state);
                st.transient.remove(&sandbox_id);
                st.runtimes.insert(id.clone(), rt.clone());
            }
            self.lifecycle(EventKind::RuntimeCreated, &rt, None);
            tracing::info!(lang = %lang, "kept a runtime");
            return Ok(self.response(out, Some(id.expose().to_string())));
        }
        // One-shot, or a failed keep run: the VM never serves anyone again,
        // and its token is revoked before the caller hears back.
        drop(token);
        if keep {
            self.stop_vm(&sandbox_id).await;
        } else {
            self.stop_oneshot(sandbox_id).await;
        }
        Ok(self.response(out, None))
    }

    /// `run` in a kept runtime.
    pub async fn run_in(
        &self,
        id: &RuntimeId,
        lang: Option<Lang>,
        code: &str,
        timeout_ms: u64,
    ) -> Result<RunResponse, WorkerError> {
        let rt = lock(&self.state)
            .runtimes
            .get(id)
            .cloned()
            .ok_or_else(|| WorkerError::RuntimeNotFound("unknown runtime_id".into()))?;
        if let Some(lang) = lang {
            if lang != rt.lang {
                return Err(WorkerError::invalid(
                    "lang",
                    format!(
                        "this runtime runs {}; omit `lang` or pass \"{}\"",
                        rt.lang, rt.lang
                    ),
                ));
            }
        }
        let mut slot = rt.slot.lock().await;
        let timed = inventory::Timed::start(&rt.meta);
        let outcome = async {
            if slot.sdk == SdkState::Absent && guest::names_iii(code) {
                self.prepare_sdk(&rt.sandbox_id, rt.lang, slot.pristine)
                    .await?;
                slot.sdk = SdkState::Prepared;
            }
            slot.pristine = false;
            self.exec(
                &rt.sandbox_id,
                Manager::for_runtime(&rt, guest::run_exec(rt.lang, code, timeout_ms)),
            )
            .await
        }
        .await;
        drop(timed);
        drop(slot);
        match outcome {
            Ok(out) => Ok(self.response(out, Some(id.expose().to_string()))),
            Err(e) if vm_gone(&e) => {
                self.expire(&rt);
                Err(WorkerError::Expired(EXPIRED_RUN.into()))
            }
            Err(e) => Err(infra_error(e, timeout_ms)),
        }
    }

    /// Forgets a runtime whose VM the daemon dropped, and unpublishes its
    /// functions. Later calls with its id get `runtime_not_found`.
    fn expire(&self, rt: &Arc<Runtime>) -> Vec<String> {
        tracing::info!(lang = %rt.lang, namespace = ?rt.namespace.as_ref().map(|n| n.canonical()), "runtime expired");
        let unregistered = self.forget(rt);
        self.lifecycle_end(EventKind::RuntimeExpired, rt, &unregistered);
        unregistered
    }

    fn forget(&self, rt: &Arc<Runtime>) -> Vec<String> {
        let fns: Vec<String> = {
            let mut f: Vec<String> = lock(&rt.functions).drain().map(|(k, _)| k).collect();
            f.sort();
            f
        };
        // Its guests can no longer connect.
        drop(lock(&rt.token).take());
        if let Some(ns) = &rt.namespace {
            self.tokens.release(ns.as_str());
        }
        {
            let mut st = lock(&self.state);
            st.runtimes.remove(&rt.id);
            if let Some(ns) = &rt.namespace {
                if st.namespaces.get(&(ns.clone(), rt.lang)) == Some(&rt.id) {
                    st.namespaces.remove(&(ns.clone(), rt.lang));
                }
            }
            for f in &fns {
                st.functions.remove(f);
            }
        }
        for f in &fns {
            self.bus.unpublish(f);
        }
        fns
    }

    // ---- register_function ----

    /// Publishes a handler. Validation runs inside the namespace runtime
    /// before the id is published.
    pub async fn register(
        &self,
        fid: FunctionId,
        lang: Lang,
        source: &str,
        description: Option<String>,
    ) -> Result<(), WorkerError> {
        let id = fid.as_str().to_string();
        {
            let mut st = lock(&self.state);
            if st.functions.contains_key(&id) || !st.reserved.insert(id.clone()) {
                return Err(WorkerError::invalid("function_id", "is already registered"));
            }
        }
        let result = self
            .register_reserved(&fid, lang, source, description)
            .await;
        lock(&self.state).reserved.remove(&id);
        result
    }

    async fn register_reserved(
        &self,
        fid: &FunctionId,
        lang: Lang,
        source: &str,
        description: Option<String>,
    ) -> Result<(), WorkerError> {
        let id = fid.as_str();
        // Anyone on the bus may own it already.
        match self
            .bus
            .call(
                "engine::functions::info",
                serde_json::json!({ "function_id": id }),
                Duration::from_secs(10),
            )
            .await
        {
            Ok(_) => {
                return Err(WorkerError::invalid(
                    "function_id",
                    "is already registered on the bus",
                ))
            }
            Err(e) if e.code == "NOT_FOUND" => {}
            Err(e) => {
                return Err(WorkerError::Engine(format!(
                    "cannot check whether the id is free: {}: {}",
                    e.code, e.message
                )))
            }
        }
        // A reaped namespace runtime is replaced once, transparently.
        for attempt in 0..2 {
            let (rt, fresh) = self.namespace_runtime(fid.namespace(), lang).await?;
            match self
                .install_handler(&rt, fid, source, description.clone())
                .await
            {
                Err(InstallError::Gone) if attempt == 0 => {
                    self.expire(&rt);
                    continue;
                }
                Err(InstallError::Gone) => {
                    return Err(WorkerError::Expired(EXPIRED_FUNCTION.into()))
                }
                Err(InstallError::Worker(e)) => {
                    if fresh && lock(&rt.functions).is_empty() {
                        // Do not keep a VM for a namespace that holds nothing.
                        self.forget(&rt);
                        self.lifecycle(EventKind::RuntimeTornDown, &rt, None);
                        self.stop_vm(&rt.sandbox_id).await;
                    }
                    return Err(e);
                }
                Ok(()) => return Ok(()),
            }
        }
        Err(WorkerError::Expired(EXPIRED_FUNCTION.into()))
    }

    /// The runtime of (namespace, lang), created on first use.
    async fn namespace_runtime(
        &self,
        ns: &Namespace,
        lang: Lang,
    ) -> Result<(Arc<Runtime>, bool), WorkerError> {
        let key = (ns.clone(), lang);
        let gate = lock(&self.namespace_locks)
            .entry(key.clone())
            .or_default()
            .clone();
        let _held = gate.lock().await;
        {
            let st = lock(&self.state);
            if let Some(rt) = st.namespaces.get(&key).and_then(|id| st.runtimes.get(id)) {
                return Ok((rt.clone(), false));
            }
        }
        let (sandbox_id, _pooled) = self
            .acquire_vm(lang)
            .await
            .map_err(|e| infra_error(e, self.config.default_timeout_ms))?;
        let id = RuntimeId::generate();
        self.tokens.hold(ns.as_str());
        let rt = Runtime::new(
            id.clone(),
            sandbox_id.clone(),
            lang,
            Some(ns.clone()),
            SdkState::Absent,
            self.mint_guest_token(Some(ns)),
        );
        {
            let mut st = lock(&self.state);
            st.transient.remove(&sandbox_id);
            st.runtimes.insert(id.clone(), rt.clone());
            st.namespaces.insert(key, id);
        }
        self.lifecycle(EventKind::RuntimeCreated, &rt, None);
        Ok((rt, true))
    }

    async fn install_handler(
        &self,
        rt: &Arc<Runtime>,
        fid: &FunctionId,
        source: &str,
        description: Option<String>,
    ) -> Result<(), InstallError> {
        if lock(&rt.functions).len() >= MAX_FUNCTIONS_PER_RUNTIME {
            return Err(InstallError::Worker(WorkerError::invalid(
                "function_id",
                format!("namespace runtime already holds {MAX_FUNCTIONS_PER_RUNTIME} functions"),
            )));
        }
        let budget = self.config.clamp_timeout(None);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = guest::handler_module_path(rt.lang, seq, fid.as_str());
        let mut slot = rt.slot.lock().await;
        let gone_or = |e: SandboxError| {
            if vm_gone(&e) {
                InstallError::Gone
            } else {
                InstallError::Worker(infra_error(e, budget))
            }
        };
        self.write_file(&rt.sandbox_id, &path, source)
            .await
            .map_err(gone_or)?;
        if slot.sdk == SdkState::Absent && guest::names_iii(source) {
            self.prepare_sdk(&rt.sandbox_id, rt.lang, slot.pristine)
                .await
                .map_err(gone_or)?;
            slot.sdk = SdkState::Prepared;
        }
        let secret = guest::new_secret();
        let out = self
            .exec(
                &rt.sandbox_id,
                Manager::for_runtime(
                    rt,
                    guest::invoke_exec(
                        rt.lang,
                        fid.as_str(),
                        &path,
                        InvokeMode::Check,
                        &Value::Null,
                        &secret,
                        budget,
                    ),
                ),
            )
            .await
            .map_err(gone_or)?;
        slot.pristine = false;
        drop(slot);
        match guest::parse_frame(&out.stdout, &secret) {
            Frame::Ok(_) => {}
            Frame::Err { kind, message } => {
                let why = match kind.as_str() {
                    "no_handler" => "must define a callable `handler(payload)`".to_string(),
                    "async_handler" => "`async def handler` is not supported; define a plain `def handler(payload)`".to_string(),
                    _ => format!("does not load: {}", tail(&message, 2000)),
                };
                return Err(InstallError::Worker(WorkerError::invalid("source", why)));
            }
            Frame::Missing => {
                return Err(InstallError::Worker(WorkerError::invalid(
                    "source",
                    format!(
                        "does not load (exit {:?}): {}",
                        out.exit_code,
                        tail(&out.stderr, 2000)
                    ),
                )))
            }
        }
        // Publish, then record: the handler looks itself up by id.
        let id = fid.as_str().to_string();
        lock(&rt.functions).insert(id.clone(), path);
        lock(&self.state)
            .functions
            .insert(id.clone(), rt.id.clone());
        let me = self.me.clone();
        let fn_id = id.clone();
        let handler: crate::bus::Handler = Arc::new(move |payload: Value| {
            let me = me.clone();
            let fn_id = fn_id.clone();
            Box::pin(async move {
                match me.upgrade() {
                    Some(m) => {
                        let totals = m.stats.handler_call.clone();
                        metered(&totals, m.invoke(&fn_id, payload)).await
                    }
                    None => Err(WorkerError::Engine("the worker is shutting down".into())),
                }
            })
        });
        self.bus.publish(
            FunctionSpec {
                id,
                description,
                request_format: None,
                response_format: None,
                metadata: Some(serde_json::json!({
                    "worker": "sandbox-code-runner",
                    "lang": rt.lang.as_str(),
                })),
            },
            handler,
        );
        tracing::info!(function_id = fid.as_str(), lang = %rt.lang, "published a handler");
        self.lifecycle(EventKind::FunctionRegistered, rt, Some(fid.as_str()));
        Ok(())
    }

    /// One call of a published handler: a fresh interpreter in its runtime.
    pub async fn invoke(&self, function_id: &str, payload: Value) -> Result<Value, WorkerError> {
        let payload = match payload {
            Value::Object(mut m) => {
                m.remove("_caller_worker_id");
                Value::Object(m)
            }
            other => other,
        };
        let rt = {
            let st = lock(&self.state);
            st.functions
                .get(function_id)
                .and_then(|id| st.runtimes.get(id))
                .cloned()
        }
        .ok_or_else(|| WorkerError::RuntimeNotFound("the function's runtime is gone".into()))?;
        let path = lock(&rt.functions)
            .get(function_id)
            .cloned()
            .ok_or_else(|| WorkerError::RuntimeNotFound("the function was unregistered".into()))?;
        let budget = self.config.clamp_timeout(None);
        let secret = guest::new_secret();
        let slot = rt.slot.lock().await;
        let timed = inventory::Timed::start(&rt.meta);
        let out = self
            .exec(
                &rt.sandbox_id,
                Manager::for_runtime(
                    &rt,
                    guest::invoke_exec(
                        rt.lang,
                        function_id,
                        &path,
                        InvokeMode::Call,
                        &payload,
                        &secret,
                        budget,
                    ),
                ),
            )
            .await;
        drop(timed);
        drop(slot);
        let out = match out {
            Ok(o) => o,
            Err(e) if vm_gone(&e) => {
                self.expire(&rt);
                return Err(WorkerError::Expired(EXPIRED_FUNCTION.into()));
            }
            Err(e) => return Err(infra_error(e, budget)),
        };
        let frame = guest::parse_frame(&out.stdout, &secret);
        if !out.stderr.is_empty() {
            tracing::debug!(function_id, output = %redact_uuids(&tail(&out.stderr, 4000)), "handler output");
        }
        match frame {
            Frame::Ok(v) => Ok(v),
            Frame::Err { kind, message } => Err(WorkerError::HandlerError(match kind.as_str() {
                "not_json" => format!("handler returned a value JSON cannot represent: {message}"),
                _ => format!("handler raised: {}", tail(&message, 2000)),
            })),
            Frame::Missing => Err(WorkerError::HandlerError(format!(
                "handler process ended (exit {:?}) without a result: {}",
                out.exit_code,
                tail(&out.stderr, 2000)
            ))),
        }
    }

    // ---- teardown ----

    pub async fn teardown_runtime(&self, id: &RuntimeId) -> Result<TeardownResponse, WorkerError> {
        let rt = lock(&self.state)
            .runtimes
            .get(id)
            .cloned()
            .ok_or_else(|| WorkerError::RuntimeNotFound("unknown runtime_id".into()))?;
        let unregistered = self.forget(&rt);
        self.lifecycle_end(EventKind::RuntimeTornDown, &rt, &unregistered);
        self.stop_vm(&rt.sandbox_id).await;
        Ok(TeardownResponse {
            runtime_id: Some(id.expose().to_string()),
            namespace: None,
            torn_down: true,
            unregistered,
        })
    }

    pub async fn teardown_namespace(
        &self,
        ns: &Namespace,
    ) -> Result<TeardownResponse, WorkerError> {
        let rts: Vec<Arc<Runtime>> = {
            let st = lock(&self.state);
            st.namespaces
                .iter()
                .filter(|((n, _), _)| n == ns)
                .filter_map(|(_, id)| st.runtimes.get(id).cloned())
                .collect()
        };
        if rts.is_empty() {
            return Err(WorkerError::RuntimeNotFound(format!(
                "no live runtime backs namespace {}",
                ns.canonical()
            )));
        }
        let mut unregistered = BTreeSet::new();
        for rt in rts {
            let fns = self.forget(&rt);
            self.lifecycle_end(EventKind::RuntimeTornDown, &rt, &fns);
            unregistered.extend(fns);
            self.stop_vm(&rt.sandbox_id).await;
        }
        Ok(TeardownResponse {
            runtime_id: None,
            namespace: Some(ns.canonical()),
            torn_down: true,
            unregistered: unregistered.into_iter().collect(),
        })
    }

    // ---- lifecycle ----

    /// Stops what a crashed predecessor of this owner left running.
    pub async fn sweep_orphans(&self) -> Result<usize, SandboxError> {
        let listed = self.on_daemon(0, self.sandbox.list()).await?;
        let mut stopped = 0;
        for s in listed {
            if s.name.as_deref().is_some_and(|n| self.naming.is_orphan(n)) {
                self.stop_vm(&s.sandbox_id).await;
                stopped += 1;
            }
        }
        self.lifecycle_swept(stopped);
        Ok(stopped)
    }

    /// Stops every VM this worker owns and unpublishes every function,
    /// within 30 s (see [`Manager::shutdown_within`]).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(Duration::from_secs(30)).await
    }
}

/// Why installing a handler did not finish.
enum InstallError {
    /// The namespace VM was reaped.
    Gone,
    Worker(WorkerError),
}

/// The last `max` bytes of `s`, on a char boundary.
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}
