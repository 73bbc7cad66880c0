//! Waiting, with a deadline, until a condition holds that a [`Notify`]
//! announces (`notify_waiters` after each change): the one loop the warm
//! pool's settling and the one-shot stops' confirmation both wait in.

use std::time::Duration;

use tokio::sync::Notify;

/// Returns once `holds()` is true, or once `patience` has passed. The
/// `Notified` future is made before each check, so a change announced
/// between the check and the wait is not missed.
pub(crate) async fn until(notify: &Notify, patience: Duration, mut holds: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let changed = notify.notified();
        if holds() {
            return;
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn returns_on_the_announced_change_and_at_the_deadline() {
        let (notify, flag) = (Notify::new(), AtomicBool::new(false));
        let waited = async {
            until(&notify, Duration::from_secs(30), || {
                flag.load(Ordering::SeqCst)
            })
            .await;
            flag.load(Ordering::SeqCst)
        };
        let change = async {
            tokio::task::yield_now().await;
            flag.store(true, Ordering::SeqCst);
            notify.notify_waiters();
        };
        let (held_when_it_returned, ()) = tokio::join!(waited, change);
        assert!(
            held_when_it_returned,
            "returned only once the change was announced"
        );
        let started = tokio::time::Instant::now();
        until(&notify, Duration::from_millis(20), || false).await;
        assert!(
            started.elapsed() >= Duration::from_millis(20),
            "gave up at the deadline"
        );
    }
}
