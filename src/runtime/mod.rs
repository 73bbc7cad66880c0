//! The runtime manager's facade: the [`Manager`] type, its construction and
//! its read-only accessors. Each operation lives in its own submodule.
//!
//! - `records`: runtime records, the shared state, the transient ledger of
//!   VMs no record holds yet, and VM naming.
//! - `daemon`: every `sandbox::*` call, charged to the current operation.
//! - `failure`: daemon outcomes mapped to [`WorkerError`]s.
//! - `warm`: the warm-pool orchestration.
//! - `sdk`: preparing the guest SDK in a VM.
//! - `run`: the `run` operation.
//! - `publish`: `register_function`, up to publishing the handler.
//! - `invoke`: one call of a published handler.
//! - `lifeline`: one-shot stops that answer once the VM is gone.
//! - `ready`: pre-started interpreters: the exec a call or run becomes.
//! - `teardown`: teardown, expiry and the orphan sweep.
//! - `inventory`: `list_runtimes` and lifecycle events.
//! - `shutdown`: the bounded shutdown.
//!
//! It speaks typed requests and typed errors; JSON and the wire envelope
//! stay in `functions` and `wire`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::bus::Bus;
use crate::config::Config;
use crate::events::Hub;
use crate::guest_access::{GuestTokens, TokenLease};
use crate::ids::{Lang, Namespace};
use crate::pool::WarmPool;
use crate::sandbox::SandboxApi;
use crate::tenancy::{Admission, TenantLimits, Tenants};

mod daemon;
mod errors;
mod failure;
mod inventory;
mod invoke;
mod lifeline;
mod lineage;
mod publish;
mod python_sdk;
mod ready;
mod records;
mod run;
mod sdk;
mod shutdown;
mod teardown;
mod warm;

pub use crate::stats::Stats;
pub use errors::{DaemonFailure, HandlerCallError, RegisterError, RunError, TeardownError};
pub use inventory::{Inventory, Liveness, PoolEntry, RuntimeEntry, RuntimeKind};
pub use publish::{Handler, HandlerEdge};
pub use records::VmNaming;
pub use shutdown::ShutdownReport;

use records::{NamespaceGate, State};

/// Largest `code` or `source` accepted.
pub(crate) const MAX_SOURCE_BYTES: usize = 1 << 20;
/// Largest `description` accepted.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Functions one namespace runtime may publish.
pub(crate) const MAX_FUNCTIONS_PER_RUNTIME: usize = 64;

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
    /// Each guest tenant's budget of VMs.
    tenants: Arc<Tenants>,
    python_sdk: crate::python_sdk::PySdkCache,
    /// The VMs with a pre-started interpreter waiting.
    ready: crate::prestart::Ready,
    /// One-shot stops in flight, and whether lifelines are in use.
    lifelines: lifeline::Lifelines,
    me: Weak<Manager>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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
        let tenants = Tenants::new(TenantLimits {
            max_concurrent_runs: config.guest_max_concurrent_runs,
            max_depth: config.guest_max_run_depth,
            max_guest_vms: config.guest_vm_ceiling(),
        });
        Arc::new_cyclic(|me| Manager {
            pool,
            events,
            tenants,
            stats: Stats::default(),
            python_sdk: Default::default(),
            ready: Default::default(),
            lifelines: Default::default(),
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

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The guest tokens: what `guest-auth` and `guest-register` consult.
    pub fn guest_tokens(&self) -> &Arc<GuestTokens> {
        &self.tokens
    }

    /// A fresh guest token, when guests connect through a guest listener,
    /// for the guests of `admitted`.
    pub(crate) fn mint_guest_token(
        &self,
        namespace: Option<&Namespace>,
        admitted: &Admission,
    ) -> Option<TokenLease> {
        self.config.guest_url.as_ref().map(|_| {
            self.tokens.mint(
                namespace.map(Namespace::as_str),
                &admitted.lineage,
                admitted.depth,
            )
        })
    }

    /// The bus, for calls made on a guest's behalf (the guest middleware).
    pub(crate) fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Whether `function_id` is one of the handlers this worker published.
    pub(crate) fn serves(&self, function_id: &str) -> bool {
        lock(&self.state).serving(function_id).is_some()
    }

    /// The guest tenants' budgets.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
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

    /// Ready pooled python VMs that already hold the guest SDK.
    pub fn pool_ready_with_sdk(&self) -> usize {
        self.pool.ready_with_sdk(Lang::Python)
    }

    /// VMs with a pre-started interpreter waiting (for tests and stats).
    pub fn interpreters_waiting(&self) -> usize {
        self.ready.len()
    }

    /// Number of live runtime records (for tests and metrics).
    pub fn runtime_count(&self) -> usize {
        lock(&self.state).runtime_count()
    }
}
