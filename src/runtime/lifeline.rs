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

/// One one-shot VM's lifeline: how its exec ended, `true` when it failed
/// as a VM that is gone. One that has ended before the stop is sent shows
/// nothing about the stop.
pub(super) struct Lifeline {
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

/// Counts a stop as pending from its creation until it is dropped.
struct PendingStop(Arc<Manager>);

impl PendingStop {
    fn new(me: Arc<Manager>) -> PendingStop {
        me.lifelines.stops_pending.fetch_add(1, Ordering::SeqCst);
        PendingStop(me)
    }
}

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
        crate::notified::until(&self.stop_confirmed, patience, || !self.stops_pending()).await;
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
        let (tx, ended) = oneshot::channel();
        let id = sandbox_id.to_string();
        tokio::spawn(async move {
            let out = me.sandbox.exec(&id, lifeline_exec()).await;
            let gone = match &out {
                Err(e) if e.is_exec_cap() => {
                    me.lifelines.turn_off();
                    false
                }
                Err(e) => e.shows_vm_gone(),
                Ok(_) => false,
            };
            let _ = tx.send(gone);
        });
        Some(Lifeline { ended })
    }

    /// Stops a one-shot VM and returns once it is gone: when the daemon
    /// confirms the stop, or sooner when the VM's lifeline shows it ended.
    pub(super) async fn stop_until_gone(&self, sandbox_id: String, line: Option<Lifeline>) {
        // Still in flight now, before the stop is sent: its end, if it
        // fails as a VM gone, is the stop's doing.
        let in_flight = line.and_then(|Lifeline { mut ended }| {
            matches!(ended.try_recv(), Err(oneshot::error::TryRecvError::Empty)).then_some(ended)
        });
        let (Some(ended), Some(me)) = (in_flight, self.me.upgrade()) else {
            return self.stop_vm(&sandbox_id).await;
        };
        charge(1, 0);
        let start = Instant::now();
        let pending = PendingStop::new(me.clone());
        let mut stop = tokio::spawn(async move {
            let _pending = pending;
            me.stop_vm(&sandbox_id).await
        });
        tokio::select! {
            _ = &mut stop => {}
            Ok(true) = ended => {}
        }
        charge_wait(start.elapsed());
    }
}
