//! A bounded shutdown: every VM this worker owns gets one stop attempt, all
//! within one total budget, whatever state the bus is in. What could not be
//! stopped is counted and logged as left for the next boot's orphan sweep
//! (same owner, different instance: see `VmNaming::is_orphan`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::records::{Runtime, VmFate};
use super::{lock, Manager};
use crate::error::redact_uuids;

/// What a shutdown achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// VMs the daemon confirmed stopped (or already gone).
    pub stopped: usize,
    /// VMs left running: the next boot's orphan sweep stops them.
    pub left: usize,
}

impl ShutdownReport {
    /// Every VM this worker owned is confirmed stopped.
    pub fn is_clean(&self) -> bool {
        self.left == 0
    }
}

impl Manager {
    /// Stops every VM this worker owns and unpublishes every function,
    /// within 30 s (see [`Manager::shutdown_within`]).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(Duration::from_secs(30)).await
    }

    /// One stop attempt; `true` when the daemon confirms the VM is gone.
    async fn stop_confirmed(&self, sandbox_id: &str) -> bool {
        let done = match self.on_daemon(0, self.sandbox.stop(sandbox_id)).await {
            Ok(()) => true,
            Err(e) if e.is_gone() => true,
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "stopping a VM failed");
                false
            }
        };
        if done {
            lock(&self.state).gone(sandbox_id);
        }
        done
    }

    /// Stops `ids` concurrently until `deadline`; returns the ones not
    /// confirmed stopped.
    async fn stop_all_until(
        &self,
        ids: Vec<String>,
        deadline: tokio::time::Instant,
    ) -> Vec<String> {
        let pending: Arc<Mutex<HashSet<String>>> =
            Arc::new(Mutex::new(ids.iter().cloned().collect()));
        let attempts = futures_util::future::join_all(ids.iter().map(|id| {
            let pending = pending.clone();
            async move {
                if self.stop_confirmed(id).await {
                    pending.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
                }
            }
        }));
        let _ = tokio::time::timeout_at(deadline, attempts).await;
        let left = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        left
    }

    /// Stops every VM this worker owns and unpublishes every function, all
    /// within `budget`. Never waits longer, even with the bus gone.
    pub async fn shutdown_within(&self, budget: Duration) -> ShutdownReport {
        let deadline = tokio::time::Instant::now() + budget;
        {
            let mut st = lock(&self.state);
            for id in self.pool.close() {
                st.track(&id);
            }
        }
        let rts: Vec<Arc<Runtime>> = lock(&self.state).runtimes();
        for rt in &rts {
            self.forget(rt, VmFate::Stopping);
        }
        // Every VM is tracked now: the records' just released, and any a
        // teardown is still stopping.
        let ids = lock(&self.state).tracked();
        let total = ids.len();
        let mut left = self.stop_all_until(ids, deadline).await;
        // VMs still warming are handed back on arrival and stopped there;
        // what arrived and was not stopped yet gets its attempt here.
        let _ = tokio::time::timeout_at(deadline, self.pool.settle(budget)).await;
        let late: Vec<String> = lock(&self.state)
            .tracked()
            .into_iter()
            .filter(|id| !left.contains(id))
            .collect();
        let late_total = late.len();
        left.extend(self.stop_all_until(late, deadline).await);
        let report = ShutdownReport {
            stopped: (total + late_total).saturating_sub(left.len()),
            left: left.len(),
        };
        if report.left > 0 {
            tracing::warn!(
                left = report.left,
                stopped = report.stopped,
                owner = %self.naming.owner,
                "VMs not stopped within the shutdown budget are left for the next boot's orphan sweep"
            );
        }
        report
    }
}
