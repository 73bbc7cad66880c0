//! Leases: the only way to exec in a VM. A [`VmLease`] is not `Clone`;
//! whoever holds it (one operation, or the runtime record it was handed to)
//! is the VM's one owner. It carries the meter of the operation that took
//! it, so work it spawns stays charged; dropped without a hand-over (kept by
//! a runtime, back in the pool, stopped, found gone) it schedules the VM's
//! stop. [`Vms::stop`] is the one stop path: a lease's, and the walks that
//! hold no lease (shutdown, the pool's drain, the orphan sweep). This file
//! is the only code that moves a table entry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::daemon::Daemon;
use super::vms::{SandboxId, VmState, VmTable, Waiting};
use crate::bus::BusError;
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::metering::{charged, current, OpTotals};
use crate::prestart::Start;
use crate::sandbox::{ExecOutput, ExecParams, ListedSandbox, SandboxError, Streamed};
use crate::seal;

/// The VM table and the daemon door, shared by every lease.
pub(crate) struct Vms {
    daemon: Daemon,
    table: VmTable,
    /// Stops nobody waits for (a dropped lease's, a one-shot's background
    /// stop): shutdown waits for them within its budget.
    stops: tokio_util::task::TaskTracker,
}

impl Vms {
    pub(crate) fn new(daemon: Daemon, pool_size: usize) -> Arc<Vms> {
        Arc::new(Vms {
            daemon,
            table: VmTable::new(pool_size),
            stops: tokio_util::task::TaskTracker::new(),
        })
    }

    pub(super) fn table(&self) -> &VmTable {
        &self.table
    }

    fn lease(self: &Arc<Self>, id: SandboxId, lang: Lang) -> VmLease {
        VmLease {
            vms: self.clone(),
            id,
            lang,
            meter: current(),
            settled: AtomicBool::new(false),
        }
    }

    /// A fresh VM for one operation. The create is owned from the moment
    /// it is sent, not from its answer: it runs on its own task, counted as
    /// under way (shutdown waits for it and reports it), and a caller that
    /// gave up meanwhile leaves a lease nobody takes, whose drop stops the
    /// VM.
    pub(crate) async fn create(self: &Arc<Self>, lang: Lang) -> Result<VmLease, SandboxError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        let meter = current();
        self.table.create_started();
        tokio::spawn(async move {
            let create = me.daemon.create(lang);
            let out = match meter.clone() {
                Some(to) => charged(to, create).await,
                None => create.await,
            };
            me.table
                .create_ended(out.as_ref().ok().map(|id| (id, lang)));
            let out = out.map(|id| VmLease {
                vms: me.clone(),
                id,
                lang,
                meter,
                settled: AtomicBool::new(false),
            });
            // Nobody took it: dropping the lease stops the VM.
            drop(tx.send(out));
        });
        rx.await.unwrap_or_else(|_| {
            Err(SandboxError::Bus(BusError::new(
                "create_lost",
                "the sandbox::create task ended without an answer",
            )))
        })
    }

    /// A fresh VM for the warm pool (reserved with `VmTable::reserve`).
    pub(crate) async fn create_for_pool(
        self: &Arc<Self>,
        lang: Lang,
    ) -> Result<VmLease, SandboxError> {
        match self.daemon.create(lang).await {
            Ok(id) => {
                self.table.booted(&id, lang);
                Ok(self.lease(id, lang))
            }
            Err(e) => {
                self.table.boot_failed(lang);
                Err(e)
            }
        }
    }

    /// A ready pooled VM, now leased (see `VmTable::take_pooled`).
    pub(crate) fn take_pooled(self: &Arc<Self>, lang: Lang, sdk: bool) -> Option<VmLease> {
        let (id, _) = self.table.take_pooled(lang, sdk)?;
        Some(self.lease(id, lang))
    }

    /// Pooled VMs handed back to warming (to plant the SDK): each leased
    /// to the preparation that returns it to the pool.
    pub(crate) fn unpool_without_sdk(self: &Arc<Self>, lang: Lang) -> Vec<VmLease> {
        let ids = self.table.unpool_without_sdk(lang);
        ids.into_iter().map(|id| self.lease(id, lang)).collect()
    }

    /// Stops every ready pooled VM (capacity pressure); answers how many.
    pub(crate) async fn drain_pool(&self) -> usize {
        let ids = self.table.drain_pool();
        futures_util::future::join_all(ids.iter().map(|id| self.stop(id))).await;
        ids.len()
    }

    /// The one way to the daemon's `exec`: behind the seal (`seal`) until
    /// one exec came back from a sealed VM.
    async fn exec(&self, id: &SandboxId, p: ExecParams) -> Result<ExecOutput, SandboxError> {
        if self.table.sealed(id) {
            return self.daemon.exec(id, p).await;
        }
        let out = self.daemon.exec(id, seal::sealed(p)).await?;
        if let Some(why) = seal::refusal(&out) {
            return Err(SandboxError::Unsealed(why));
        }
        if seal::took(&out) {
            self.table.seal_took(id);
        }
        Ok(out)
    }

    /// Stops `id` on a task of its own, charged to `to` (one call now),
    /// tracked so shutdown can wait for it.
    fn stop_detached(
        self: &Arc<Self>,
        to: Option<Arc<OpTotals>>,
        id: SandboxId,
    ) -> tokio::task::JoinHandle<bool> {
        if let Some(to) = &to {
            crate::metering::charge_to(to, 1, 0);
        }
        let vms = self.clone();
        self.stops.spawn(async move { vms.stop(&id).await })
    }

    /// Waits until every detached stop has answered, up to `deadline`.
    pub(crate) async fn detached_stops_done(&self, deadline: tokio::time::Instant) {
        self.stops.close();
        let _ = tokio::time::timeout_at(deadline, self.stops.wait()).await;
        self.stops.reopen();
    }

    /// Every sandbox the daemon holds (of every owner).
    pub(crate) async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError> {
        self.daemon.list().await
    }

    /// The one stop path: the VM is stopping from here on (nothing waits in
    /// it), and leaves the table once the daemon confirms it gone (a VM it
    /// already dropped is fine). One that would not stop stays in the table
    /// as stopping, so shutdown tries again. `true` when confirmed.
    pub(crate) async fn stop(&self, id: &SandboxId) -> bool {
        self.table.set_state(id, VmState::Stopping);
        match self.daemon.stop(id).await {
            Ok(()) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "stopping a VM failed");
                return false;
            }
        }
        self.table.remove(id);
        true
    }
}

/// One VM, held by its one owner.
pub(crate) struct VmLease {
    vms: Arc<Vms>,
    id: SandboxId,
    lang: Lang,
    meter: Option<Arc<OpTotals>>,
    /// Handed over, stopped, or found gone: nothing to do on drop.
    settled: AtomicBool,
}

impl VmLease {
    pub(crate) fn lang(&self) -> Lang {
        self.lang
    }

    /// For matching the daemon's own listing (the inventory's liveness).
    pub(crate) fn sandbox_id(&self) -> &SandboxId {
        &self.id
    }

    /// Every exec of the worker's, behind the seal until the VM is sealed;
    /// a streamed run's behind the copy its followers read
    /// (`stream::StreamTo::run`).
    pub(crate) async fn exec(&self, mut p: ExecParams) -> Result<ExecOutput, SandboxError> {
        match p.stream.take() {
            Some(to) => to.run(p, |q| self.vms.exec(&self.id, q)).await,
            None => self.vms.exec(&self.id, p).await,
        }
    }

    /// An exec that runs beside its operation (a one-shot's lifeline),
    /// charged to the lease's operation; nobody waits for it.
    pub(crate) fn spawn_exec(
        &self,
        p: ExecParams,
    ) -> tokio::task::JoinHandle<Result<ExecOutput, SandboxError>> {
        let (vms, id) = (self.vms.clone(), self.id.clone());
        Daemon::detached(self.meter.clone(), async move { vms.exec(&id, p).await })
    }

    pub(crate) async fn write_file(&self, path: &str, content: &str) -> Result<(), SandboxError> {
        self.vms.daemon.write_file(&self.id, path, content).await
    }

    pub(crate) async fn write_streamed(
        &self,
        path: &str,
        content: Arc<str>,
    ) -> Result<Streamed, SandboxError> {
        self.vms
            .daemon
            .write_streamed(&self.id, path, content)
            .await
    }

    pub(crate) async fn read_streamed(
        &self,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        self.vms.daemon.read_streamed(&self.id, path, limit).await
    }

    /// Waits on work of the daemon's (a stop racing a lifeline), charged
    /// as time on the daemon.
    pub(crate) async fn daemon_wait<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        self.vms.daemon.waited(work).await
    }

    fn settle(&self) -> bool {
        !self.settled.swap(true, Ordering::AcqRel)
    }

    /// Stops the VM and returns once the daemon confirmed it (or failed).
    pub(crate) async fn stop(&self) -> bool {
        self.settle();
        self.vms.stop(&self.id).await
    }

    /// Stops the VM without waiting: charged to the current operation in
    /// calls, not in its caller's wait. The handle ends when the daemon
    /// answered.
    pub(crate) fn stop_in_background(&self) -> tokio::task::JoinHandle<bool> {
        self.settle();
        self.vms.stop_detached(current(), self.id.clone())
    }

    /// The daemon dropped the VM (reaped): it leaves the table.
    pub(crate) fn gone(&self) {
        self.settle();
        self.vms.table.remove(&self.id);
    }

    /// Hands the VM to a runtime record, which holds this lease from now on.
    pub(crate) fn back_a_runtime(&self) {
        self.vms.table.set_state(&self.id, VmState::Runtime);
    }

    /// Hands the VM back to the warm pool, ready.
    pub(crate) fn into_pool(self) {
        self.settle();
        self.vms.table.pool(&self.id);
    }

    pub(crate) fn has_sdk(&self) -> bool {
        self.vms.table.sdk(&self.id)
    }

    /// The guest SDK is in the VM now.
    pub(crate) fn sdk_prepared(&self) {
        self.vms.table.sdk_prepared(&self.id);
    }

    /// No tenant code ran in the VM yet.
    pub(crate) fn pristine(&self) -> bool {
        self.vms.table.pristine(&self.id)
    }

    pub(crate) fn tenant_code_ran(&self) {
        self.vms.table.tenant_code_ran(&self.id);
    }

    pub(crate) fn next_generation(&self) -> u64 {
        self.vms.table.next_generation()
    }

    pub(crate) fn take_waiting(&self) -> Option<Waiting> {
        self.vms.table.take_waiting(&self.id)
    }

    /// The VM's latest waiting generation, left waiting (node's: see
    /// `VmTable::peek_waiting`).
    pub(crate) fn peek_waiting(&self) -> Option<Waiting> {
        self.vms.table.peek_waiting(&self.id)
    }

    pub(crate) fn interpreter_returned(&self) {
        self.vms.table.returned(&self.id);
    }

    /// See `VmTable::start_plan`.
    pub(crate) fn start_plan(&self, most: usize, beside: bool) -> Option<Start> {
        self.vms.table.start_plan(&self.id, most, beside)
    }

    /// See `VmTable::replace_plan`.
    pub(crate) fn replace_plan(&self) -> Start {
        self.vms.table.replace_plan(&self.id)
    }

    pub(crate) fn started(&self, generation: Option<u64>) {
        self.vms.table.started(&self.id, generation);
    }

    pub(crate) fn put_waiting(&self, generation: u64) {
        self.vms.table.put_waiting(&self.id, generation);
    }

    pub(crate) fn forget_waiting(&self, generation: u64) {
        self.vms.table.forget_waiting(&self.id, generation);
    }
}

impl Drop for VmLease {
    fn drop(&mut self) {
        if !self.settle() {
            return;
        }
        let live = matches!(
            self.vms.table.state(&self.id),
            Some(VmState::Leased | VmState::Runtime | VmState::Warming)
        );
        if !live || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let meter = self.meter.take();
        drop(self.vms.stop_detached(meter, self.id.clone()));
    }
}

impl std::fmt::Debug for VmLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmLease")
            .field("lang", &self.lang)
            .finish_non_exhaustive()
    }
}
