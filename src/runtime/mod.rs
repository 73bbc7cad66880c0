//! The runtime core: the [`Manager`] that holds the VM table, the runtime
//! records and the settings, and the public face of its operations. Each
//! operation is a plain function over those in its own file.
//!
//! - `vms`: the table of every VM (one state each), `SandboxId`.
//! - `lease`: `VmLease`, the only way to exec in or stop a VM; the one stop.
//! - `daemon`: the one door to `sandbox::*`, every call charged.
//! - `records`: the runtime records behind one lock (`Book`); `VmNaming`.
//! - `run`, `publish`, `invoke`, `teardown`, `inventory`, `sweep`,
//!   `shutdown`: the operations.
//! - `acquire`, `pool`: a VM for one tenant; the warm pool's upkeep.
//! - `ready`: the exec a call or run becomes (pre-started interpreters).
//! - `lifeline`: one-shot stops that answer once the VM is gone.
//! - `lifecycle`, `meta`: the lifecycle events; a runtime's bookkeeping.
//! - `sdk`, `python_sdk`: the guest SDK in a VM.
//! - `slots`, `session`: a runtime's call slots; a kept runtime's session.
//! - `errors`, `failure`: one error per operation, daemon outcomes mapped.
//!
//! The operations take the `Manager`; the pieces below them take narrow
//! views (`tests/layering.rs` keeps it so).
//!
//! It speaks typed requests and typed errors; JSON and the wire envelope
//! stay in `functions` and `wire`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::bus::Bus;
use crate::config::Config;
use crate::events::Hub;
use crate::guest_access::{GuestTokens, TokenLease};
use crate::ids::{FunctionId, Lang, Namespace, RuntimeId};
use crate::sandbox::{SandboxApi, SandboxError};
use crate::tenancy::{Admission, Caller, TenantLimits, Tenants};
use crate::wire::{HandlerPayload, RunResponse, TeardownResponse};

mod acquire;
mod daemon;
mod errors;
mod failure;
mod inventory;
mod invoke;
pub(crate) mod lease;
mod lifecycle;
mod lifeline;
mod meta;
mod pool;
mod publish;
mod python_sdk;
mod ready;
mod records;
mod run;
mod sdk;
mod session;
mod shutdown;
mod slots;
mod sweep;
mod teardown;
mod vms;

pub use crate::stats::Stats;
pub use errors::{DaemonFailure, HandlerCallError, RegisterError, RunError, TeardownError};
pub use inventory::{Inventory, Liveness, PoolEntry, RuntimeEntry, RuntimeKind};
pub use publish::{Handler, HandlerEdge};
pub use records::VmNaming;
pub use run::Keep;
pub use shutdown::ShutdownReport;

use invoke::CallOrigin;
use lease::Vms;
use records::Book;

/// Largest `code` or `source` accepted.
pub(crate) const MAX_SOURCE_BYTES: usize = 1 << 20;
/// Largest `description` accepted.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Functions one namespace runtime may publish.
pub(crate) const MAX_FUNCTIONS_PER_RUNTIME: usize = 64;

/// The runtime core: the VM table, the runtime records, the settings, and
/// the services operations share. Cheap to share: it lives behind `Arc`.
pub struct Manager {
    /// Every VM this worker knows, and the door to the daemon.
    vms: Arc<Vms>,
    /// The runtime records (one lock), the namespace gates, the module
    /// sequence.
    book: Book,
    bus: Arc<dyn Bus>,
    config: Config,
    naming: VmNaming,
    stats: Stats,
    /// Tokens of guests on the guest listener (`guest_url`).
    tokens: Arc<GuestTokens>,
    /// Lifecycle subscribers (`sandbox-code-runner::event`).
    events: Arc<Hub>,
    /// The streamed runs' recent output, for `watch`.
    tails: crate::stream::Tails,
    /// Each guest tenant's budget of VMs.
    tenants: Arc<Tenants>,
    python_sdk: crate::python_sdk::PySdkCache,
    /// Set when the daemon refused a second exec in one sandbox (S003):
    /// one-shot runs go without lifelines from then on.
    lifelines_off: AtomicBool,
    me: Weak<Manager>,
}

impl Manager {
    pub fn new(
        sandbox: Arc<dyn SandboxApi>,
        bus: Arc<dyn Bus>,
        config: Config,
        naming: VmNaming,
        guest_engine_url: String,
    ) -> Arc<Manager> {
        let events = Arc::new(Hub::new(&bus));
        let tenants = Tenants::new(TenantLimits {
            max_concurrent_runs: config.guest_max_concurrent_runs,
            max_depth: config.guest_max_run_depth,
            max_guest_vms: config.guest_vm_ceiling(),
        });
        for (name, source) in crate::daemon_limits::DAEMON.sources() {
            tracing::debug!(
                limit = name,
                source,
                "the daemon is assumed to have its default"
            );
        }
        let daemon = daemon::Daemon::new(
            sandbox,
            naming.vm_name(),
            config.idle_ttl_secs,
            config.guest_url.clone().unwrap_or(guest_engine_url),
        );
        Arc::new_cyclic(|me| Manager {
            vms: Vms::new(daemon, config.warm_pool),
            book: Book::default(),
            events,
            tails: Default::default(),
            tenants,
            stats: Stats::default(),
            python_sdk: Default::default(),
            lifelines_off: AtomicBool::new(false),
            bus,
            config,
            naming,
            tokens: GuestTokens::new(),
            me: me.clone(),
        })
    }

    // ---- the operations (each in its own file).

    /// `run` without a runtime, from the main listener: one-shot, or keep.
    pub async fn run_fresh(
        &self,
        lang: Lang,
        code: &str,
        keep: bool,
        timeout_ms: u64,
    ) -> Result<RunResponse, RunError> {
        let keep = if keep { Keep::Files } else { Keep::Nothing };
        run::fresh(self, &Caller::Trusted, lang, code, keep, timeout_ms, None).await
    }

    /// `run` without a runtime, for `caller` (see `run::fresh`).
    pub async fn run_fresh_as(
        &self,
        caller: &Caller,
        lang: Lang,
        code: &str,
        keep: Keep,
        timeout_ms: u64,
        output: Option<&std::sync::Arc<crate::stream::Sink>>,
    ) -> Result<RunResponse, RunError> {
        run::fresh(self, caller, lang, code, keep, timeout_ms, output).await
    }

    /// `run` in a kept runtime.
    pub async fn run_in(
        &self,
        id: &RuntimeId,
        lang: Option<Lang>,
        session: Option<bool>,
        code: &str,
        timeout_ms: u64,
        output: Option<&std::sync::Arc<crate::stream::Sink>>,
    ) -> Result<RunResponse, RunError> {
        run::in_runtime(self, id, lang, session, code, timeout_ms, output).await
    }

    /// `register_function` for `caller` (see `publish::register`).
    pub async fn register_as(
        &self,
        caller: &Caller,
        fid: FunctionId,
        handler: Handler,
        edge: HandlerEdge,
    ) -> Result<(), RegisterError> {
        publish::register(self, caller, fid, handler, edge).await
    }

    /// One call of a published handler, from a caller on the bus: it
    /// queues in the caller's turn (`HandlerPayload::caller`).
    pub(crate) async fn invoke(
        &self,
        function_id: &str,
        payload: HandlerPayload,
    ) -> Result<serde_json::Value, HandlerCallError> {
        let caller = format!("worker:{}", payload.caller().unwrap_or_default());
        invoke::call(self, function_id, payload, &caller, CallOrigin::Caller).await
    }

    /// One call of a published handler by guest code of `lineage`, served
    /// in-process by the guest middleware: it queues in its tenant's turn,
    /// or, made by a handler of the same namespace (`nested`), takes a free
    /// slot at once or is refused (see `invoke::CallOrigin::Nested`).
    pub(crate) async fn invoke_for_guest(
        &self,
        function_id: &str,
        payload: HandlerPayload,
        lineage: &crate::tenancy::Lineage,
        nested: bool,
    ) -> Result<serde_json::Value, HandlerCallError> {
        let caller = format!("guest:{}", lineage.as_str());
        let how = if nested {
            CallOrigin::Nested
        } else {
            CallOrigin::Caller
        };
        invoke::call(self, function_id, payload, &caller, how).await
    }

    pub(crate) async fn teardown_runtime(
        &self,
        id: &RuntimeId,
    ) -> Result<TeardownResponse, TeardownError> {
        teardown::runtime(self, id).await
    }

    /// Stops every runtime of `ns` for `caller` (see `teardown::namespace`).
    pub(crate) async fn teardown_namespace_as(
        &self,
        caller: &Caller,
        ns: &Namespace,
    ) -> Result<TeardownResponse, TeardownError> {
        teardown::namespace(self, caller, ns).await
    }

    /// The inventory: one `sandbox::list` at most, nothing else on the daemon.
    pub async fn inventory(&self) -> Inventory {
        inventory::list(self).await
    }

    /// Stops what a crashed predecessor of this owner left running.
    pub async fn sweep_orphans(&self) -> Result<usize, SandboxError> {
        sweep::orphans(self).await
    }

    /// Fills the warm pool at boot, and keeps it topped up.
    pub fn start_pool(&self) {
        pool::start(self);
    }

    /// Plants the archived python SDK in the pooled VMs that lack it.
    pub(crate) fn plant_pooled(&self) {
        pool::plant_pooled(self);
    }

    /// What planting the python SDK needs of the manager (see
    /// `python_sdk::Planting`).
    fn planting<'a>(&'a self, archived: &'a (dyn Fn() + Send + Sync)) -> python_sdk::Planting<'a> {
        python_sdk::Planting {
            cache: &self.python_sdk,
            budget_ms: self.config.sdk_install_timeout_ms,
            archived,
        }
    }

    /// Makes `iii` importable in `vm` (see `sdk::prepare`); a fresh python
    /// archive is planted in the pool's VMs too.
    async fn prepare_sdk(&self, vm: &lease::VmLease, pristine: bool) -> Result<(), SandboxError> {
        let archived = || self.plant_pooled();
        sdk::prepare(self.planting(&archived), vm, pristine).await
    }

    /// Plants the archived python SDK in a pooled `vm` (see
    /// `python_sdk::plant_archived`).
    async fn plant_archived(&self, vm: &lease::VmLease) -> Result<bool, SandboxError> {
        let archived = || self.plant_pooled();
        python_sdk::plant_archived(self.planting(&archived), vm).await
    }

    /// Stops every VM this worker owns and unpublishes every function,
    /// within 30 s (see [`Manager::shutdown_within`]).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(Duration::from_secs(30)).await
    }

    /// Stops every VM this worker owns and unpublishes every function, all
    /// within `budget`. Never waits longer, even with the bus gone.
    pub async fn shutdown_within(&self, budget: Duration) -> ShutdownReport {
        shutdown::within(self, budget).await
    }

    // ---- read-only accessors.

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
        self.book.lock().serving(function_id).is_some()
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

    /// The lifecycle subscribers (for the trigger-type provider).
    pub fn events(&self) -> &Arc<Hub> {
        &self.events
    }

    /// The streamed runs' recent output (`run` registers, `watch` reads).
    pub(crate) fn tails(&self) -> &crate::stream::Tails {
        &self.tails
    }

    /// Ready warm VMs of `lang`.
    pub fn pool_ready(&self, lang: Lang) -> usize {
        self.vms.table().pool_counts(lang).0
    }

    /// Ready pooled python VMs that already hold the guest SDK.
    pub fn pool_ready_with_sdk(&self) -> usize {
        self.vms.table().pooled_with_sdk(Lang::Python)
    }

    /// VMs with a pre-started interpreter waiting (for tests and stats).
    pub fn interpreters_waiting(&self) -> usize {
        self.vms.table().waiting_count()
    }

    /// Number of live runtime records (for tests and metrics).
    pub fn runtime_count(&self) -> usize {
        self.book.lock().runtime_count()
    }
}
