//! Stopping a child process of the suite's (a worker, an engine binary) the
//! way a supervisor does: SIGTERM, then SIGKILL once its grace is over.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;

/// Sends SIGTERM to `child` (nothing when it has already been reaped).
pub(crate) fn sigterm(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// SIGTERM, then wait up to `grace`; a child still running then is killed.
/// Its exit status, once reaped.
pub(crate) async fn stop(mut child: Child, grace: Duration) -> Option<ExitStatus> {
    sigterm(&child);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = child.kill().await;
            child.wait().await.ok()
        }
    }
}
