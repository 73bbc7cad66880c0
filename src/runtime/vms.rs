//! The table of every VM this worker knows, behind one lock: each entry is
//! in exactly one state (warming for the pool, pooled, leased to one
//! operation, backing a runtime, stopping) with what belongs to the VM
//! (language, SDK state, the interpreter waiting in it). The warm pool, the
//! ledger shutdown walks, and the pre-started interpreters are views of
//! this one map, so a VM cannot be in two of them or in none.
//!
//! Pure bookkeeping: the daemon is called by `lease`, which is the only
//! code that moves an entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::ids::Lang;
use crate::prestart::Start;

/// The daemon's id of a VM. It never leaves the worker: its `Debug` is
/// redacted, and nothing converts it back into a string for a caller.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SandboxId(Arc<str>);

impl SandboxId {
    pub(crate) fn new(id: impl Into<Arc<str>>) -> SandboxId {
        SandboxId(id.into())
    }

    /// For the daemon's calls and the daemon's own listings only.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SandboxId(..)")
    }
}

/// Where a VM is in its life. Every entry is in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VmState {
    /// Booted for the warm pool and being prepared; no tenant has it.
    Warming,
    /// Ready in the warm pool (`order`: when it arrived, oldest first).
    Pooled { order: u64 },
    /// Held by one operation's lease (a run, a registration's new VM).
    Leased,
    /// Backing a kept or namespace runtime (its record holds the lease).
    Runtime,
    /// A stop was sent and the daemon has not confirmed it.
    Stopping,
}

/// A pre-started interpreter waiting in a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) generation: u64,
    /// The guest SDK was planted after it started, so it lacks the module:
    /// the next call replaces it.
    pub(crate) stale: bool,
}

/// One VM and what belongs to it.
#[derive(Debug)]
struct Vm {
    lang: Lang,
    state: VmState,
    /// The guest SDK is in it (planted, installed, or tried and failed:
    /// the wrapper then explains on first use, so it is not retried).
    sdk: bool,
    /// No tenant code has run in it yet: what it installs may be archived.
    pristine: bool,
    /// An exec came back from behind the seal (`seal`): its shared mounts
    /// are read-only, so later execs go bare.
    sealed: bool,
    /// Interpreters waiting, each its own generation.
    waiting: Vec<Waiting>,
    /// Interpreters taken by calls still running: while one is out, no
    /// call may start one `Alone` (that spawn ends every other server, the
    /// lent one included).
    lent: usize,
    /// Interpreters being started `Beside` the others, not waiting yet.
    starting: usize,
}

impl Vm {
    /// A VM the daemon just created: nothing in it yet.
    fn new(lang: Lang, state: VmState) -> Vm {
        Vm {
            lang,
            state,
            sdk: false,
            sealed: false,
            pristine: true,
            waiting: Vec::new(),
            lent: 0,
            starting: 0,
        }
    }
}

#[derive(Default)]
struct Table {
    vms: HashMap<SandboxId, Vm>,
    /// Creates under way for the pool: VMs the daemon may be booting that
    /// have no id yet.
    booting: HashMap<Lang, usize>,
    /// Creates under way for one operation, with no id yet (`Vms::create`
    /// owns each until the daemon answers, caller or no caller).
    creating: usize,
    pool_size: usize,
    closed: bool,
    arrivals: u64,
    generations: u64,
}

impl Table {
    fn count(&self, lang: Lang, pick: impl Fn(&Vm) -> bool) -> usize {
        self.vms
            .values()
            .filter(|vm| vm.lang == lang && pick(vm))
            .count()
    }

    fn warming(&self, lang: Lang) -> usize {
        self.booting.get(&lang).copied().unwrap_or(0)
            + self.count(lang, |vm| vm.state == VmState::Warming)
    }
}

/// The table. One lock; every method takes it once.
#[derive(Default)]
pub(super) struct VmTable {
    table: Mutex<Table>,
    /// Announced after every change a waiter may be waiting for (a VM
    /// arrived in the pool or failed to, a stop was confirmed).
    changed: Notify,
}

impl VmTable {
    pub(super) fn new(pool_size: usize) -> VmTable {
        let t = VmTable::default();
        t.lock().pool_size = pool_size;
        t
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A VM in `state`, as if the daemon had just created it (the table's
    /// own tests; the worker's creates go through `create_ended` and
    /// `booted`).
    #[cfg(test)]
    pub(super) fn insert(&self, id: &SandboxId, lang: Lang, state: VmState) {
        self.lock().vms.insert(id.clone(), Vm::new(lang, state));
    }

    /// Moves a VM this worker knows to `state`; `false` when it is not in
    /// the table (the daemon confirmed it gone).
    pub(super) fn set_state(&self, id: &SandboxId, state: VmState) -> bool {
        let mut t = self.lock();
        let Some(vm) = t.vms.get_mut(id) else {
            return false;
        };
        vm.state = state;
        if state == VmState::Stopping {
            vm.waiting.clear();
        }
        true
    }

    pub(super) fn state(&self, id: &SandboxId) -> Option<VmState> {
        self.lock().vms.get(id).map(|vm| vm.state)
    }

    /// The daemon confirmed the VM gone (stopped or reaped).
    pub(super) fn remove(&self, id: &SandboxId) {
        self.lock().vms.remove(id);
        self.changed.notify_waiters();
    }

    /// Every VM in the table, in whatever state.
    pub(super) fn ids(&self) -> Vec<SandboxId> {
        self.lock().vms.keys().cloned().collect()
    }

    /// VMs whose stop the daemon has not confirmed yet.
    pub(super) fn stopping(&self) -> usize {
        self.lock()
            .vms
            .values()
            .filter(|vm| vm.state == VmState::Stopping)
            .count()
    }

    /// Waits, up to `patience`, until no stop is unconfirmed.
    pub(super) async fn stops_confirmed(&self, patience: Duration) {
        crate::notified::until(&self.changed, patience, || self.stopping() == 0).await;
    }

    // ---- the warm pool: entries in `Warming` and `Pooled`, and `booting`.

    /// A ready VM of `lang` for one tenant, now leased: one whose SDK
    /// state is `sdk` if there is one (the oldest such), else the oldest.
    /// Returns its id and whether the SDK is in it.
    pub(super) fn take_pooled(&self, lang: Lang, sdk: bool) -> Option<(SandboxId, bool)> {
        let mut t = self.lock();
        let pooled = |vm: &Vm| match vm.state {
            VmState::Pooled { order } if vm.lang == lang => Some(order),
            _ => None,
        };
        let oldest = |want: Option<bool>| {
            t.vms
                .iter()
                .filter(|(_, vm)| want.is_none_or(|s| vm.sdk == s))
                .filter_map(|(id, vm)| pooled(vm).map(|o| (o, id.clone())))
                .min_by_key(|(o, _)| *o)
                .map(|(_, id)| id)
        };
        let id = oldest(Some(sdk)).or_else(|| oldest(None))?;
        let vm = t.vms.get_mut(&id)?;
        vm.state = VmState::Leased;
        Some((id, vm.sdk))
    }

    /// How many VMs to start booting now for `lang`; they count as warming
    /// from here on (`booted` or `boot_failed` settles each).
    pub(super) fn reserve(&self, lang: Lang) -> usize {
        let mut t = self.lock();
        if t.closed {
            return 0;
        }
        let have = t.warming(lang) + t.count(lang, |vm| matches!(vm.state, VmState::Pooled { .. }));
        let missing = t.pool_size.saturating_sub(have);
        *t.booting.entry(lang).or_default() += missing;
        missing
    }

    /// A create for one operation is under way.
    pub(super) fn create_started(&self) {
        self.lock().creating += 1;
    }

    /// That create answered: with `id`, now leased, or with an error.
    pub(super) fn create_ended(&self, id: Option<(&SandboxId, Lang)>) {
        let mut t = self.lock();
        t.creating = t.creating.saturating_sub(1);
        if let Some((id, lang)) = id {
            t.vms.insert(id.clone(), Vm::new(lang, VmState::Leased));
        }
        drop(t);
        self.changed.notify_waiters();
    }

    /// A reserved create answered with `id`: it warms from here on.
    pub(super) fn booted(&self, id: &SandboxId, lang: Lang) {
        let mut t = self.lock();
        if let Some(n) = t.booting.get_mut(&lang) {
            *n = n.saturating_sub(1);
        }
        t.vms.insert(id.clone(), Vm::new(lang, VmState::Warming));
    }

    /// A reserved create failed: nothing is booting for it any more.
    pub(super) fn boot_failed(&self, lang: Lang) {
        if let Some(n) = self.lock().booting.get_mut(&lang) {
            *n = n.saturating_sub(1);
        }
        self.changed.notify_waiters();
    }

    /// A warming VM is ready: it joins the pool. After `close` it joins
    /// too, and the shutdown that closed the pool stops it in its next
    /// pass (stopping it here as well would race that pass).
    pub(super) fn pool(&self, id: &SandboxId) {
        let mut t = self.lock();
        t.arrivals += 1;
        let order = t.arrivals;
        if let Some(vm) = t.vms.get_mut(id) {
            vm.state = VmState::Pooled { order };
        }
        drop(t);
        self.changed.notify_waiters();
    }

    /// The ready VMs of `lang` that lack the SDK, back to warming so it can
    /// be planted while no tenant holds them.
    pub(super) fn unpool_without_sdk(&self, lang: Lang) -> Vec<SandboxId> {
        let mut t = self.lock();
        if t.closed {
            return Vec::new();
        }
        t.vms
            .iter_mut()
            .filter(|(_, vm)| vm.lang == lang && !vm.sdk)
            .filter(|(_, vm)| matches!(vm.state, VmState::Pooled { .. }))
            .map(|(id, vm)| {
                vm.state = VmState::Warming;
                id.clone()
            })
            .collect()
    }

    /// Every ready pooled VM, now stopping (capacity pressure, shutdown).
    pub(super) fn drain_pool(&self) -> Vec<SandboxId> {
        let mut t = self.lock();
        t.vms
            .iter_mut()
            .filter(|(_, vm)| matches!(vm.state, VmState::Pooled { .. }))
            .map(|(id, vm)| {
                vm.state = VmState::Stopping;
                vm.waiting.clear();
                id.clone()
            })
            .collect()
    }

    /// Closes the pool for good: nothing is reserved any more.
    pub(super) fn close_pool(&self) {
        self.lock().closed = true;
    }

    pub(super) fn pool_closed(&self) -> bool {
        self.lock().closed
    }

    /// (ready, warming) VMs of `lang` in the pool.
    pub(super) fn pool_counts(&self, lang: Lang) -> (usize, usize) {
        let t = self.lock();
        let ready = t.count(lang, |vm| matches!(vm.state, VmState::Pooled { .. }));
        (ready, t.warming(lang))
    }

    /// Ready pooled VMs of `lang` that already hold the guest SDK.
    pub(super) fn pooled_with_sdk(&self, lang: Lang) -> usize {
        self.lock().count(lang, |vm| {
            vm.sdk && matches!(vm.state, VmState::Pooled { .. })
        })
    }

    /// VMs booting for the pool, with or without an id yet.
    pub(super) fn warming_total(&self) -> usize {
        let t = self.lock();
        t.warming(Lang::Node) + t.warming(Lang::Python)
    }

    /// Creates under way, for the pool or an operation, that have no id
    /// yet: VMs the daemon may be booting for this worker.
    pub(super) fn creates_in_flight(&self) -> usize {
        let t = self.lock();
        t.booting.values().sum::<usize>() + t.creating
    }

    /// Waits, up to `patience`, until no create of an operation is under
    /// way (each then has an entry, or failed).
    pub(super) async fn creates_settled(&self, patience: Duration) {
        crate::notified::until(&self.changed, patience, || self.lock().creating == 0).await;
    }

    /// Waits, up to `patience`, until nothing warms for the pool.
    pub(super) async fn pool_settled(&self, patience: Duration) {
        crate::notified::until(&self.changed, patience, || self.warming_total() == 0).await;
    }

    // ---- what belongs to one VM.

    pub(super) fn sdk(&self, id: &SandboxId) -> bool {
        self.lock().vms.get(id).is_some_and(|vm| vm.sdk)
    }

    /// The SDK is in the VM now: what waits there started without it.
    pub(super) fn sdk_prepared(&self, id: &SandboxId) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            vm.sdk = true;
            for w in &mut vm.waiting {
                w.stale = true;
            }
        }
    }

    pub(super) fn sealed(&self, id: &SandboxId) -> bool {
        self.lock().vms.get(id).is_some_and(|vm| vm.sealed)
    }

    pub(super) fn seal_took(&self, id: &SandboxId) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            vm.sealed = true;
        }
    }

    pub(super) fn pristine(&self, id: &SandboxId) -> bool {
        self.lock().vms.get(id).is_some_and(|vm| vm.pristine)
    }

    /// Tenant code ran (or is about to run) in the VM.
    pub(super) fn tenant_code_ran(&self, id: &SandboxId) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            vm.pristine = false;
        }
    }

    /// A generation no VM has used.
    pub(super) fn next_generation(&self) -> u64 {
        let mut t = self.lock();
        t.generations += 1;
        t.generations
    }

    /// An interpreter waiting in the VM, now the caller's (lent until
    /// `returned`).
    pub(super) fn take_waiting(&self, id: &SandboxId) -> Option<Waiting> {
        let mut t = self.lock();
        let vm = t.vms.get_mut(id)?;
        let w = vm.waiting.pop()?;
        vm.lent += 1;
        Some(w)
    }

    /// The latest generation waiting in the VM, left there: node's
    /// interpreters are counted in the guest (`scr_fill`), and calls at
    /// once each relay to one of them.
    pub(super) fn peek_waiting(&self, id: &SandboxId) -> Option<Waiting> {
        self.lock().vms.get(id)?.waiting.last().cloned()
    }

    /// A call that took an interpreter is done with it.
    pub(super) fn returned(&self, id: &SandboxId) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            vm.lent = vm.lent.saturating_sub(1);
        }
    }

    /// How a call that found none waiting may start an interpreter in a VM
    /// that holds at most `most` (its call slots): `Alone` when none is
    /// waiting, lent or starting (ending any leftover), `Beside` the busy
    /// ones when `beside` allows it (counted as starting until `started`),
    /// `None` when as many as the VM may hold exist already (run cold).
    pub(super) fn start_plan(&self, id: &SandboxId, most: usize, beside: bool) -> Option<Start> {
        let mut t = self.lock();
        let vm = t.vms.get_mut(id)?;
        let held = vm.waiting.len() + vm.lent + vm.starting;
        if held == 0 {
            Some(Start::Alone)
        } else if beside && held < most {
            vm.starting += 1;
            Some(Start::Beside)
        } else {
            None
        }
    }

    /// How a call replaces the interpreter it took (python's, started
    /// before the SDK): `Alone` when it is the VM's only one, else `Beside`
    /// the others (counted as starting; the count stays, since the
    /// replaced one is retired).
    /// (A VM gone from the table starts nothing: `Alone` there is moot.)
    pub(super) fn replace_plan(&self, id: &SandboxId) -> Start {
        let mut t = self.lock();
        let Some(vm) = t.vms.get_mut(id) else {
            return Start::Alone;
        };
        if vm.waiting.len() + vm.lent + vm.starting <= 1 {
            Start::Alone
        } else {
            vm.starting += 1;
            Start::Beside
        }
    }

    /// A `Beside` start ended: its generation waits now (`Some`), or it
    /// failed.
    pub(super) fn started(&self, id: &SandboxId, generation: Option<u64>) {
        let mut t = self.lock();
        let Some(vm) = t.vms.get_mut(id) else { return };
        vm.starting = vm.starting.saturating_sub(1);
        if let (Some(g), false) = (generation, vm.state == VmState::Stopping) {
            vm.waiting.push(Waiting {
                generation: g,
                stale: false,
            });
        }
    }

    /// Generation `generation` waits in the VM. A VM that is stopping or
    /// gone keeps nothing waiting.
    pub(super) fn put_waiting(&self, id: &SandboxId, generation: u64) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            if vm.state != VmState::Stopping {
                // A node fill replaces the last: one generation names them.
                if vm.lang == Lang::Node {
                    vm.waiting.clear();
                }
                vm.waiting.push(Waiting {
                    generation,
                    stale: false,
                });
            }
        }
    }

    /// What waited as `generation` is gone (its server died).
    pub(super) fn forget_waiting(&self, id: &SandboxId, generation: u64) {
        if let Some(vm) = self.lock().vms.get_mut(id) {
            vm.waiting.retain(|w| w.generation != generation);
        }
    }

    /// VMs with an interpreter waiting.
    pub(super) fn waiting_count(&self) -> usize {
        self.lock()
            .vms
            .values()
            .filter(|vm| !vm.waiting.is_empty())
            .count()
    }
}

#[cfg(test)]
mod tests;
