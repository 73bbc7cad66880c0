//! Cost accounting: what each kind of operation (a bus function, the warm
//! pool) spent on the daemon. An operation's task carries its totals in a
//! task-local, so every `sandbox::*` call made for it — background work it
//! started included — is charged without threading a counter through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Totals of one kind of operation (a bus function, the warm pool): how
/// many ran, and the `sandbox::*` calls and planted bytes they cost,
/// background work they started included.
#[derive(Debug, Default)]
pub struct OpTotals {
    pub ops: AtomicU64,
    pub calls: AtomicU64,
    pub bytes_planted: AtomicU64,
    /// Wall time of the operations, as their callers waited.
    pub total_nanos: AtomicU64,
    /// Of that, the time spent waiting on `sandbox::*` calls: the rest is
    /// what the worker adds on top of the daemon.
    pub sandbox_nanos: AtomicU64,
    /// pip installs of the python SDK these operations paid for, and their time.
    pub sdk_pip_installs: AtomicU64,
    pub sdk_install_nanos: AtomicU64,
}

impl OpTotals {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.ops.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
            self.bytes_planted.load(Ordering::Relaxed),
        )
    }
}

tokio::task_local! {
    /// The operation the current task works for; sandbox calls are charged to it.
    pub(crate) static CHARGE_TO: Arc<OpTotals>;
}

impl OpTotals {
    /// Mean microseconds per operation the worker added on top of its
    /// sandbox calls (decode, bookkeeping, encode; not the bus hop).
    pub(crate) fn added_us_mean(&self) -> f64 {
        let ops = self.ops.load(Ordering::Relaxed);
        if ops == 0 {
            return 0.0;
        }
        let total = self.total_nanos.load(Ordering::Relaxed) as f64;
        let sandbox = self.sandbox_nanos.load(Ordering::Relaxed) as f64;
        ((total - sandbox) / ops as f64 / 1e3).max(0.0)
    }
}

/// Charges time spent waiting on the daemon to the current operation.
pub(crate) fn charge_wait(d: std::time::Duration) {
    let _ = CHARGE_TO.try_with(|t| {
        t.sandbox_nanos
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    });
}

/// Charges a pip install of the guest SDK to the current operation.
pub(crate) fn charge_install(d: std::time::Duration) {
    let _ = CHARGE_TO.try_with(|t| {
        t.sdk_pip_installs.fetch_add(1, Ordering::Relaxed);
        t.sdk_install_nanos
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    });
}

/// Runs one operation charged to `totals`, counting it and its wall time.
pub async fn metered<F: std::future::Future>(totals: &Arc<OpTotals>, fut: F) -> F::Output {
    totals.ops.fetch_add(1, Ordering::Relaxed);
    let start = std::time::Instant::now();
    let out = CHARGE_TO.scope(totals.clone(), fut).await;
    totals.total_nanos.fetch_add(
        start.elapsed().as_nanos().min(u64::MAX as u128) as u64,
        Ordering::Relaxed,
    );
    out
}

/// Charges a call (and planted bytes) to the current operation, if any.
pub(crate) fn charge(calls: u64, bytes: u64) {
    let _ = CHARGE_TO.try_with(|t| {
        t.calls.fetch_add(calls, Ordering::Relaxed);
        t.bytes_planted.fetch_add(bytes, Ordering::Relaxed);
    });
}

/// Runs background work (which no caller waits for) charged to `to`.
pub async fn charged<F: std::future::Future>(to: Arc<OpTotals>, fut: F) -> F::Output {
    CHARGE_TO.scope(to, fut).await
}

/// The operation the current task is charged to, if any: what a VM lease
/// keeps so work it spawns later is charged to the same operation.
pub(crate) fn current() -> Option<Arc<OpTotals>> {
    CHARGE_TO.try_with(Arc::clone).ok()
}

/// Charges a call (and planted bytes) to `to`, from outside its task.
pub(crate) fn charge_to(to: &OpTotals, calls: u64, bytes: u64) {
    to.calls.fetch_add(calls, Ordering::Relaxed);
    to.bytes_planted.fetch_add(bytes, Ordering::Relaxed);
}
