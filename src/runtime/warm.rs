//! The warm pool's work: handing tenants a warm VM when one is ready,
//! refilling the pool in the background (charged to `pool`), planting the
//! python SDK in pooled VMs once the worker has it archived, and draining
//! the pool under capacity pressure. Which VMs are pooled or warming is the
//! VM table's.

use std::sync::Arc;
use std::time::Duration;

use super::lease::VmLease;
use super::{python_sdk, ready, Manager};
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::metering::charged;
use crate::sandbox::{ExecParams, SandboxError};

/// A VM handed to one tenant, and the pool's refill, due once the caller's
/// first exec is done (so that exec does not compete with the boot of its
/// replacement): drop `refill` then.
pub(super) struct Acquired {
    pub(super) vm: VmLease,
    /// It came from the warm pool (so it may have been reaped meanwhile).
    pub(super) pooled: bool,
    pub(super) refill: RefillOnDrop,
}

pub(super) struct RefillOnDrop {
    manager: std::sync::Weak<Manager>,
    lang: Lang,
}

impl Drop for RefillOnDrop {
    fn drop(&mut self) {
        if let Some(m) = self.manager.upgrade() {
            refill(&m, self.lang);
        }
    }
}

/// How long a create refused for capacity waits for this worker's own
/// unconfirmed stops (each lasts a stop's grace, ~200 ms) before it drains
/// the pool.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// How often the warm pool is topped up without traffic.
const POOL_MAINTENANCE: Duration = Duration::from_secs(2);

/// A VM for one tenant: a warm one if the pool has it (one that holds the
/// SDK when `wants_sdk`), else a fresh one. Capacity pressure drains the
/// pool before the caller sees `capacity`.
pub(super) async fn acquire(
    m: &Manager,
    lang: Lang,
    wants_sdk: bool,
) -> Result<Acquired, SandboxError> {
    if wants_sdk && lang == Lang::Python {
        m.python_sdk.note_wanted();
    }
    let refill = RefillOnDrop {
        manager: m.me.clone(),
        lang,
    };
    if let Some(vm) = m.vms.take_pooled(lang, wants_sdk) {
        return Ok(Acquired {
            vm,
            pooled: true,
            refill,
        });
    }
    let vm = match m.vms.create(lang).await {
        Err(e) if e.is_capacity() => create_under_pressure(m, lang, e).await?,
        other => other?,
    };
    Ok(Acquired {
        vm,
        pooled: false,
        refill,
    })
}

/// A fresh VM after a create was refused for capacity (`refused`): once
/// this worker's own unconfirmed stops are through (a one-shot answered
/// once its VM was gone; the daemon may count it for the rest of its stop's
/// grace), then once the warm pool has given its VMs back. The refusal when
/// the pool held none.
async fn create_under_pressure(
    m: &Manager,
    lang: Lang,
    refused: SandboxError,
) -> Result<VmLease, SandboxError> {
    let table = m.vms.table();
    let refused = if table.stopping() > 0 {
        table.stops_confirmed(STOP_PATIENCE).await;
        match m.vms.create(lang).await {
            Err(e) if e.is_capacity() => e,
            other => return other,
        }
    } else {
        refused
    };
    if m.vms.drain_pool().await == 0 {
        refill(m, lang);
        return Err(refused);
    }
    m.vms.create(lang).await
}

/// Tops the pool of `lang` up in the background.
fn refill(m: &Manager, lang: Lang) {
    for _ in 0..m.vms.table().reserve(lang) {
        prepare_for_pool(m, move |me| async move {
            let vm = me.vms.create_for_pool(lang).await;
            warm_one(&me, vm).await
        });
    }
}

/// Plants the archived python SDK in the pooled VMs that lack it. Called
/// when an archive first exists; later pooled VMs get it as they warm.
pub(super) fn plant_pooled(m: &Manager) {
    for vm in m.vms.unpool_without_sdk(Lang::Python) {
        prepare_for_pool(m, |me| async move { with_sdk_planted(&me, vm).await });
    }
}

/// Runs one VM's preparation for the pool off every caller's path (charged
/// to `pool`); the preparation hands the VM to the pool.
fn prepare_for_pool<F, Fut>(m: &Manager, prepare: F)
where
    F: FnOnce(Arc<Manager>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Some(me) = m.me.upgrade() else { return };
    tokio::spawn(charged(m.stats.pool.clone(), prepare(me)));
}

/// A pooled python VM with the archived SDK planted when there is one,
/// then an interpreter waiting; back in the pool.
async fn with_sdk_planted(m: &Manager, vm: VmLease) {
    match python_sdk::plant_archived(m, &vm).await {
        Ok(planted) => {
            if planted {
                vm.sdk_prepared();
            }
            // After the SDK, so the waiting interpreter has it loaded.
            ready::start_waiting(m, &vm).await;
            vm.into_pool();
        }
        Err(e) => {
            tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: planting the SDK found the VM gone");
            vm.stop().await;
        }
    }
}

/// Boots one pooled VM: one cheap exec that pays the boot; a python VM
/// also gets the SDK when the worker has it archived. Then an interpreter
/// starts waiting in it for the run that takes it.
async fn warm_one(m: &Manager, created: Result<VmLease, SandboxError>) {
    let vm = match created {
        Ok(vm) => vm,
        Err(e) => {
            tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: create failed");
            return;
        }
    };
    let warm = ExecParams {
        argv: vec!["true".into()],
        timeout_ms: 60_000,
        ..ExecParams::default()
    };
    match vm.exec(warm).await {
        Ok(_) if vm.lang() == Lang::Python => with_sdk_planted(m, vm).await,
        Ok(_) => {
            ready::start_waiting(m, &vm).await;
            vm.into_pool();
        }
        Err(e) => {
            tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: warm-up exec failed");
            vm.stop().await;
        }
    }
}

/// Fills the pool at boot, and keeps it topped up: a refill that failed
/// (capacity, a daemon not yet there) is retried by this loop, and a pool
/// with no traffic still recovers.
pub(super) fn start(m: &Manager) {
    if m.config.warm_pool == 0 {
        return;
    }
    refill(m, Lang::Node);
    refill(m, Lang::Python);
    let me = m.me.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POOL_MAINTENANCE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(m) = me.upgrade() else { return };
            if m.vms.table().pool_closed() {
                return;
            }
            refill(&m, Lang::Node);
            refill(&m, Lang::Python);
        }
    });
}
