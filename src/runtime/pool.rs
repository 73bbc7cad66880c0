//! The warm pool's upkeep: filling it at boot and topping it up in the
//! background (charged to `pool`), warming each VM (its seal and boot, the
//! python SDK when archived, an interpreter waiting), and planting the SDK
//! in pooled VMs once the worker has it archived. Which VMs are pooled or
//! warming is the VM table's; handing one out is `acquire`'s.

use std::sync::Arc;
use std::time::Duration;

use super::lease::VmLease;
use super::{ready, Manager};
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::metering::charged;
use crate::sandbox::{ExecParams, SandboxError};

/// How often the warm pool is topped up without traffic.
const POOL_MAINTENANCE: Duration = Duration::from_secs(2);

/// Tops the pool of `lang` up in the background.
pub(super) fn refill(m: &Manager, lang: Lang) {
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
    match m.plant_archived(&vm).await {
        Ok(planted) => {
            if planted {
                vm.sdk_prepared();
            }
            // After the SDK, so the waiting interpreter has it loaded.
            ready::start_waiting(m.config.prestart_mode().for_runs(), &vm).await;
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
            ready::start_waiting(m.config.prestart_mode().for_runs(), &vm).await;
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
