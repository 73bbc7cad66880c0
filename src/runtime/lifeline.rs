//! A one-shot VM's lifeline, and one-shot stops that answer once the VM is
//! gone rather than once the daemon has finished its bookkeeping.
//!
//! The daemon's `sandbox::stop` SIGTERMs the VM process, which turns the
//! signal into the VMM's exit and is gone within milliseconds; then the
//! daemon sleeps a fixed 200 ms grace, SIGKILLs, deletes the scratch and
//! removes its entry, and only then answers. A one-shot run must not answer
//! before its VM is gone, but nothing requires it to wait out that grace. So
//! each one-shot VM gets a lifeline: one idle exec held in flight for the
//! run's whole life. When the VM ends, that exec fails at once as a VM that
//! disconnected mid-run (S300). The answer goes out at the first of: the
//! stop returned, or the lifeline failed that way *after* the stop was sent.
//! A lifeline that ends any other way (the run's own code killed it, the
//! bus failed, its `sleep` is missing) proves nothing, and the answer waits
//! for the stop as it always did. The stop itself carries on in the
//! background; the VM stays in the ledger until the daemon confirms it.
//!
//! The lifeline costs one exec slot of the VM. A daemon configured with a
//! single slot per sandbox refuses one of the two (S003): then lifelines
//! are turned off for good and the run is retried once on another VM.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{oneshot, Notify};

use super::Manager;
use crate::config::OneshotStop;
use crate::metering::{charge, charge_wait};
use crate::sandbox::ExecParams;

/// How long a lifeline's `sleep` lasts: past any one-shot run (its budget,
/// plus an SDK install), and inside the daemon's exec ceiling, so that it
/// ends as a normal exit if the VM outlives it.
const LIFELINE_SECS: u64 = 290;
/// The lifeline exec's own budget: the daemon's `max_exec_timeout_ms`.
const LIFELINE_TIMEOUT_MS: u64 = 300_000;

/// One one-shot VM's lifeline.
pub(super) struct Lifeline {
    /// Set just before the stop is sent: only a failure seen after it shows
    /// that the stop ended the VM.
    stopping: Arc<AtomicBool>,
    /// `true` once the lifeline failed as a VM that is gone, after `stopping`.
    ended: oneshot::Receiver<bool>,
}

/// The one-shot stops the daemon has not confirmed yet, and whether
/// lifelines are still in use.
#[derive(Default)]
pub(crate) struct Lifelines {
    stops_pending: AtomicUsize,
    stop_confirmed: Notify,
    /// Set when the daemon refused a second exec in one sandbox (S003).
    off: AtomicBool,
}

/// Counts a stop as pending until it is dropped.
struct PendingStop(Arc<Manager>);

impl Drop for PendingStop {
    fn drop(&mut self) {
        self.0
            .lifelines
            .stops_pending
            .fetch_sub(1, Ordering::SeqCst);
        self.0.lifelines.stop_confirmed.notify_waiters();
    }
}

impl Lifelines {
    /// Turns lifelines off: the daemon cannot hold one beside a run.
    pub(super) fn turn_off(&self) {
        if !self.off.swap(true, Ordering::SeqCst) {
            tracing::info!(
                "the daemon allows one exec per sandbox: one-shot runs now wait for its stop"
            );
        }
    }

    /// Whether a stop this worker sent has not been confirmed yet.
    pub(super) fn stops_pending(&self) -> bool {
        self.stops_pending.load(Ordering::SeqCst) > 0
    }

    /// Waits, up to `patience`, until every pending stop is confirmed.
    pub(super) async fn stops_confirmed(&self, patience: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let confirmed = self.stop_confirmed.notified();
            tokio::pin!(confirmed);
            confirmed.as_mut().enable();
            if !self.stops_pending() {
                return;
            }
            if tokio::time::timeout_at(deadline, confirmed).await.is_err() {
                return;
            }
        }
    }
}

fn lifeline_exec() -> ExecParams {
    ExecParams {
        argv: vec!["sleep".into(), LIFELINE_SECS.to_string()],
        timeout_ms: LIFELINE_TIMEOUT_MS,
        ..ExecParams::default()
    }
}

impl Manager {
    /// Starts the lifeline of a one-shot VM (none when one-shot stops do not
    /// wait for the VM's end, or lifelines are off). Charged to the run.
    pub(super) fn lifeline(&self, sandbox_id: &str) -> Option<Lifeline> {
        if self.config.oneshot_stop != OneshotStop::BeforeResponse
            || self.lifelines.off.load(Ordering::SeqCst)
        {
            return None;
        }
        let me = self.me.upgrade()?;
        charge(1, 0);
        let stopping = Arc::new(AtomicBool::new(false));
        let (tx, ended) = oneshot::channel();
        let (id, seen) = (sandbox_id.to_string(), stopping.clone());
        tokio::spawn(async move {
            let out = me.sandbox.exec(&id, lifeline_exec()).await;
            let gone = match &out {
                Err(e) if e.is_exec_cap() => {
                    me.lifelines.turn_off();
                    false
                }
                Err(e) => seen.load(Ordering::SeqCst) && e.shows_vm_gone(),
                Ok(_) => false,
            };
            let _ = tx.send(gone);
        });
        Some(Lifeline { stopping, ended })
    }

    /// Stops a one-shot VM and returns once it is gone: when the daemon
    /// confirms the stop, or sooner when the VM's lifeline shows it ended.
    pub(super) async fn stop_until_gone(&self, sandbox_id: String, line: Option<Lifeline>) {
        let (Some(line), Some(me)) = (line, self.me.upgrade()) else {
            return self.stop_vm(&sandbox_id).await;
        };
        line.stopping.store(true, Ordering::SeqCst);
        charge(1, 0);
        let start = Instant::now();
        self.lifelines.stops_pending.fetch_add(1, Ordering::SeqCst);
        let pending = PendingStop(me.clone());
        let mut stop = tokio::spawn(async move {
            let _pending = pending;
            me.stop_vm(&sandbox_id).await
        });
        tokio::select! {
            _ = &mut stop => {}
            Ok(true) = line.ended => {}
        }
        charge_wait(start.elapsed());
    }
}
