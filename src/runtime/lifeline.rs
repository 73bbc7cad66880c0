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
//! background; the VM stays in the table, stopping, until the daemon
//! confirms it.
//!
//! The lifeline costs one exec slot of the VM. A daemon configured with a
//! single slot per sandbox refuses one of the two (S003): then lifelines
//! are turned off for good and the run is retried once on another VM.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::lease::VmLease;
use super::Manager;
use crate::config::OneshotStop;
use crate::daemon_limits::DAEMON;
use crate::sandbox::ExecParams;

/// One one-shot VM's lifeline: how its exec ended, `true` when it failed
/// as a VM that is gone. One that has ended before the stop is sent shows
/// nothing about the stop.
pub(super) struct Lifeline {
    ended: oneshot::Receiver<bool>,
}

/// Turns lifelines off: the daemon cannot hold one beside a run.
pub(super) fn turn_off(m: &Manager) {
    if !m.lifelines_off.swap(true, Ordering::SeqCst) {
        tracing::info!(
            "the daemon allows one exec per sandbox: one-shot runs now wait for its stop"
        );
    }
}

/// A `sleep` past any one-shot run (its budget, plus an SDK install) and
/// inside the daemon's exec ceiling, so that it ends as a normal exit if
/// the VM outlives it.
fn lifeline_exec() -> ExecParams {
    const _: () = assert!(DAEMON.max_exec_timeout_ms.value >= 60_000);
    let ceiling = DAEMON.max_exec_timeout_ms.value;
    ExecParams {
        argv: vec!["sleep".into(), (ceiling / 1000 - 10).to_string()],
        timeout_ms: ceiling,
        ..ExecParams::default()
    }
}

/// Starts the lifeline of a one-shot VM (none when one-shot stops do not
/// wait for the VM's end, or lifelines are off), charged to the run.
pub(super) fn start(m: &Manager, vm: &VmLease) -> Option<Lifeline> {
    if m.config.oneshot_stop != OneshotStop::BeforeResponse
        || m.lifelines_off.load(Ordering::SeqCst)
    {
        return None;
    }
    let (tx, ended) = oneshot::channel();
    let exec = vm.spawn_exec(lifeline_exec());
    let me = m.me.clone();
    tokio::spawn(async move {
        let gone = match exec.await {
            Ok(Err(e)) if e.is_exec_cap() => {
                if let Some(m) = me.upgrade() {
                    turn_off(&m);
                }
                false
            }
            Ok(Err(e)) => e.shows_vm_gone(),
            _ => false,
        };
        let _ = tx.send(gone);
    });
    Some(Lifeline { ended })
}

/// Stops a one-shot VM and returns once it is gone: when the daemon
/// confirms the stop, or sooner when the VM's lifeline shows it ended.
pub(super) async fn stop_until_gone(vm: VmLease, line: Option<Lifeline>) {
    // Still in flight now, before the stop is sent: its end, if it fails as
    // a VM gone, is the stop's doing.
    let in_flight = line.and_then(|Lifeline { mut ended }| {
        matches!(ended.try_recv(), Err(oneshot::error::TryRecvError::Empty)).then_some(ended)
    });
    let Some(ended) = in_flight else {
        vm.stop().await;
        return;
    };
    let mut stop = vm.stop_in_background();
    vm.daemon_wait(async {
        tokio::select! {
            _ = &mut stop => {}
            Ok(true) = ended => {}
        }
    })
    .await;
}
