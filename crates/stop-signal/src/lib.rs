//! Waiting for a supervisor's stop request: the one copy both long-running
//! binaries of the workspace (the worker and `code-runner-conformance serve`)
//! use, so they stop on the same signals.

use tokio::signal::unix::{signal, SignalKind};

/// Resolves on the first SIGTERM (a supervisor's stop) or SIGINT (Ctrl-C).
/// Where the handlers cannot be installed, it falls back to Ctrl-C alone
/// rather than never resolving.
pub async fn stop_requested() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{raise, Signal};
    use tokio::signal::unix::{signal, SignalKind};

    #[tokio::test]
    async fn a_sigterm_resolves_it() {
        // A handler of the test's own first, so that no SIGTERM raised here
        // can take the default action (ending the test process).
        let _keep = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        let stop = super::stop_requested();
        tokio::pin!(stop);
        // The first poll installs its handlers; no signal is pending yet.
        tokio::select! {
            biased;
            _ = &mut stop => panic!("resolved before any signal"),
            _ = async {} => {}
        }
        raise(Signal::SIGTERM).expect("raise SIGTERM");
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .expect("stop_requested resolved after SIGTERM");
    }
}
