//! A bounded shutdown: it walks the VM table, and every VM in it gets one
//! stop attempt, all within one total budget, whatever state the bus is in.
//! VMs still booting, for the warm pool or for an operation's create, are
//! waited for within the same budget; what could not be stopped (or was
//! still booting at the end) is
//! counted and logged as left for the next boot's orphan sweep (same owner,
//! another instance: see `VmNaming::is_orphan`), and the exit status says
//! so. Charged to `shutdown`, like any operation.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::records::Runtime;
use super::vms::SandboxId;
use super::{teardown, Manager};
use crate::metering::metered;

/// What a shutdown achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// VMs the daemon confirmed stopped (or already gone).
    pub stopped: usize,
    /// VMs left running, or still booting when the budget ran out: the
    /// next boot's orphan sweep stops them.
    pub left: usize,
}

impl ShutdownReport {
    /// Every VM this worker owned is confirmed stopped.
    pub fn is_clean(&self) -> bool {
        self.left == 0
    }
}

/// Stops `ids` concurrently until `deadline`; answers how many the daemon
/// confirmed.
async fn stop_all_until(m: &Manager, ids: &[SandboxId], deadline: tokio::time::Instant) -> usize {
    let confirmed = std::sync::atomic::AtomicUsize::new(0);
    let attempts = futures_util::future::join_all(ids.iter().map(|id| async {
        if m.vms.stop(id).await {
            confirmed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }));
    let _ = tokio::time::timeout_at(deadline, attempts).await;
    confirmed.into_inner()
}

/// Stops every VM this worker owns and unpublishes every function, all
/// within `budget`. Never waits longer, even with the bus gone.
pub(super) async fn within(m: &Manager, budget: Duration) -> ShutdownReport {
    metered(&m.stats.shutdown, walk(m, budget)).await
}

async fn walk(m: &Manager, budget: Duration) -> ShutdownReport {
    let deadline = tokio::time::Instant::now() + budget;
    let table = m.vms.table();
    table.close_pool();
    let rts: Vec<Arc<Runtime>> = m.book.lock().runtimes();
    for rt in &rts {
        teardown::forget(m, rt);
    }
    // Every VM is in the table: pooled, leased to a call in flight, the
    // records' just released, and any a teardown is still stopping.
    let first = table.ids();
    let mut stopped = stop_all_until(m, &first, deadline).await;
    // VMs still warming join the table (pooled) as they arrive, and an
    // operation's create in flight joins it leased (its lease stops it once
    // its caller is gone); each gets its attempt here. One that failed its
    // attempt above is not retried.
    let _ = tokio::time::timeout_at(deadline, async {
        table.pool_settled(budget).await;
        table.creates_settled(budget).await;
    })
    .await;
    let tried: HashSet<SandboxId> = first.into_iter().collect();
    let late: Vec<SandboxId> = table
        .ids()
        .into_iter()
        .filter(|id| !tried.contains(id))
        .collect();
    stopped += stop_all_until(m, &late, deadline).await;
    // Stops already under way when it began (a one-shot's, a dropped
    // lease's) answer before the report counts what is left.
    m.vms.detached_stops_done(deadline).await;
    let report = ShutdownReport {
        stopped,
        left: table.ids().len() + table.creates_in_flight(),
    };
    if report.left > 0 {
        tracing::warn!(
            left = report.left,
            stopped = report.stopped,
            owner = %m.naming.owner,
            "VMs not stopped within the shutdown budget are left for the next boot's orphan sweep"
        );
    }
    report
}
