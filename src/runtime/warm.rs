//! Warm-pool orchestration: handing tenants a warm VM when one is ready,
//! refilling the pool in the background (charged to `pool`), planting the
//! python SDK in pooled VMs once the worker has it archived, and draining
//! the pool under capacity pressure.

use std::sync::Arc;
use std::time::Duration;

use super::{lock, Manager};
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::metering::charged;
use crate::pool::PooledVm;
use crate::sandbox::{ExecParams, SandboxError};

/// A VM handed to one tenant. Dropping it tops the pool up: after the
/// caller's first exec, so that exec does not compete with the boot of its
/// replacement.
pub(super) struct Acquired {
    pub id: String,
    /// It came from the warm pool (so it may have been reaped meanwhile).
    pub pooled: bool,
    /// The guest SDK is already in it.
    pub sdk: bool,
    _refill: RefillOnDrop,
}

struct RefillOnDrop {
    manager: std::sync::Weak<Manager>,
    lang: Lang,
}

impl Drop for RefillOnDrop {
    fn drop(&mut self) {
        if let Some(m) = self.manager.upgrade() {
            m.refill(self.lang);
        }
    }
}

/// How long a create refused for capacity waits for this worker's own
/// unconfirmed stops (each is the daemon's grace, ~200 ms) before it drains
/// the pool.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// How often the warm pool is topped up without traffic.
const POOL_MAINTENANCE: Duration = Duration::from_secs(2);

impl Manager {
    /// A VM for one tenant: a warm one if the pool has it (one that holds
    /// the SDK when `wants_sdk`), else a fresh one. Capacity pressure drains
    /// the pool before the caller sees `capacity`.
    pub(super) async fn acquire_vm(
        &self,
        lang: Lang,
        wants_sdk: bool,
    ) -> Result<Acquired, SandboxError> {
        if wants_sdk && lang == Lang::Python {
            self.python_sdk.note_wanted();
        }
        // Out of the pool and into the ledger under one lock.
        let taken = {
            let mut st = lock(&self.state);
            let taken = self.pool.take(lang, wants_sdk);
            if let Some(vm) = &taken {
                st.track(&vm.id);
            }
            taken
        };
        let refill = || RefillOnDrop {
            manager: self.me.clone(),
            lang,
        };
        if let Some(vm) = taken {
            return Ok(Acquired {
                id: vm.id,
                pooled: true,
                sdk: vm.sdk,
                _refill: refill(),
            });
        }
        let fresh = |id| Acquired {
            id,
            pooled: false,
            sdk: false,
            _refill: refill(),
        };
        match self.create_vm(lang).await {
            Err(e) if e.is_capacity() => self.create_under_pressure(lang, e).await.map(fresh),
            other => other.map(fresh),
        }
    }

    /// A fresh VM after a create was refused for capacity (`refused`): once
    /// this worker's own unconfirmed stops are through (a one-shot answered
    /// once its VM was gone; the daemon may count it for the rest of its
    /// stop's grace), then once the warm pool has given its VMs back. The
    /// refusal when the pool held none.
    async fn create_under_pressure(
        &self,
        lang: Lang,
        refused: SandboxError,
    ) -> Result<String, SandboxError> {
        let refused = if self.lifelines.stops_pending() {
            self.lifelines.stops_confirmed(STOP_PATIENCE).await;
            match self.create_vm(lang).await {
                Err(e) if e.is_capacity() => e,
                other => return other,
            }
        } else {
            refused
        };
        if self.drain_pool().await == 0 {
            self.refill(lang);
            return Err(refused);
        }
        self.create_vm(lang).await
    }

    /// Tops the pool of `lang` up in the background.
    fn refill(&self, lang: Lang) {
        for _ in 0..self.pool.reserve(lang) {
            self.prepare_for_pool(lang, move |me| async move { me.warm_one(lang).await });
        }
    }

    /// Plants the archived python SDK in the pooled VMs that lack it. Called
    /// when an archive first exists; later pooled VMs get it as they warm.
    pub(crate) fn plant_pooled(&self) {
        for id in self.pool.take_without_sdk(Lang::Python) {
            self.prepare_for_pool(
                Lang::Python,
                |me| async move { me.with_sdk_planted(id).await },
            );
        }
    }

    /// Runs one VM's preparation for the pool off every caller's path
    /// (charged to `pool`), then hands the VM to the pool. The pool already
    /// counts it as warming.
    fn prepare_for_pool<F, Fut>(&self, lang: Lang, prepare: F)
    where
        F: FnOnce(Arc<Manager>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Option<PooledVm>> + Send + 'static,
    {
        let Some(me) = self.me.upgrade() else { return };
        let totals = self.stats.pool.clone();
        tokio::spawn(charged(totals, async move {
            let vm = prepare(me.clone()).await;
            me.arrive(lang, vm).await;
        }));
    }

    /// A pooled python VM with the archived SDK planted when there is one.
    /// `None` when the VM is gone (it was stopped).
    async fn with_sdk_planted(&self, id: String) -> Option<PooledVm> {
        match self.plant_archived_sdk(&id).await {
            Ok(sdk) => {
                // After the SDK, so the waiting interpreter has it loaded.
                self.start_waiting(&id, Lang::Python).await;
                Some(PooledVm { id, sdk })
            }
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: planting the SDK found the VM gone");
                self.discard_unpooled(&id).await;
                None
            }
        }
    }

    /// Boots one pooled VM: create, then one cheap exec that pays the boot;
    /// a python VM also gets the SDK when the worker has it archived. Then
    /// an interpreter starts waiting in it for the run that takes it.
    async fn warm_one(&self, lang: Lang) -> Option<PooledVm> {
        let id = match self.create_unrecorded(lang).await {
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
            Ok(_) if lang == Lang::Python => self.with_sdk_planted(id).await,
            Ok(_) => {
                self.start_waiting(&id, lang).await;
                Some(PooledVm::bare(id))
            }
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: warm-up exec failed");
                self.discard_unpooled(&id).await;
                None
            }
        }
    }

    /// A warming VM is done: it joins the pool, or, when the pool closed
    /// meanwhile (shutdown), it goes to the ledger, handed back under the
    /// state lock, so the shutdown that saw the pool settle stops it in its
    /// late pass. Stopping it here as well would race that pass: a second
    /// stop of a VM being stopped answers at once, and the shutdown would
    /// end before the VM is gone.
    async fn arrive(&self, lang: Lang, vm: Option<PooledVm>) {
        let mut st = lock(&self.state);
        if let Some(id) = self.pool.arrive(lang, vm) {
            st.track(&id);
        }
    }

    /// Stops a VM that was warming for the pool and will not join it.
    async fn discard_unpooled(&self, id: &str) {
        lock(&self.state).track(id);
        self.stop_vm(id).await;
    }

    /// Stops every ready pooled VM; returns how many.
    async fn drain_pool(&self) -> usize {
        let ids = {
            let mut st = lock(&self.state);
            let ids = self.pool.drain();
            for id in &ids {
                st.track(id);
            }
            ids
        };
        let n = ids.len();
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
}
