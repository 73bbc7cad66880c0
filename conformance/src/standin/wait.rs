//! Waiting on an observable condition with a deadline: the one way tests,
//! benches and the stand-ins synchronize (never a fixed sleep).
//!
//! [`Deadline`] owns the arithmetic and the pause between two looks; a loop
//! with early exits of its own (a process that died, a state to carry from
//! one look to the next) ticks it. [`until`] is the common case: a probe
//! that is either met or not yet.

use std::future::Future;
use std::time::{Duration, Instant};

/// The pause between two looks of [`until`].
const TICK: Duration = Duration::from_millis(20);

/// A point in time to give up at, and how long to pause between two looks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    end: Instant,
    every: Duration,
}

impl Deadline {
    /// Gives up `within` from now, looking again every `every`.
    pub(crate) fn after(within: Duration, every: Duration) -> Deadline {
        Deadline {
            end: Instant::now() + within,
            every,
        }
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.end
    }

    /// Pauses before the next look: false (at once) when the deadline has
    /// passed, so a loop reads `if !deadline.tick().await { give up }`.
    pub(crate) async fn tick(&self) -> bool {
        if self.passed() {
            return false;
        }
        tokio::time::sleep(self.pause()).await;
        true
    }

    /// [`Deadline::tick`] for synchronous code (a `Drop`, a test driving
    /// child processes without a runtime).
    pub(crate) fn tick_blocking(&self) -> bool {
        if self.passed() {
            return false;
        }
        std::thread::sleep(self.pause());
        true
    }

    /// The pause, never past the deadline itself.
    fn pause(&self) -> Duration {
        self.every
            .min(self.end.saturating_duration_since(Instant::now()))
    }
}

/// Polls `probe` until it returns true (→ true) or `deadline` passes (→ false).
pub async fn until<F, Fut>(deadline: Duration, mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Deadline::after(deadline, TICK);
    loop {
        if probe().await {
            return true;
        }
        if !deadline.tick().await {
            return false;
        }
    }
}

/// [`until`] for synchronous code: polls `probe` every `every`.
pub fn until_blocking(
    deadline: Duration,
    every: Duration,
    mut probe: impl FnMut() -> bool,
) -> bool {
    let deadline = Deadline::after(deadline, every);
    loop {
        if probe() {
            return true;
        }
        if !deadline.tick_blocking() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn true_as_soon_as_the_probe_is_and_false_at_the_deadline() {
        let mut n = 0;
        assert!(
            until(Duration::from_secs(5), || {
                n += 1;
                let done = n >= 3;
                async move { done }
            })
            .await
        );
        assert_eq!(n, 3);
        assert!(!until(Duration::from_millis(50), || async { false }).await);
    }

    #[test]
    fn the_blocking_form_looks_until_met_and_gives_up_at_the_deadline() {
        let mut n = 0;
        assert!(until_blocking(
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                n >= 3
            }
        ));
        assert_eq!(n, 3);
        let started = Instant::now();
        assert!(!until_blocking(
            Duration::from_millis(30),
            Duration::from_millis(5),
            || false
        ));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn a_tick_refuses_once_the_deadline_has_passed() {
        let d = Deadline::after(Duration::from_millis(30), Duration::from_millis(5));
        let mut ticks = 0;
        while d.tick().await {
            ticks += 1;
        }
        assert!(d.passed());
        assert!(ticks >= 1, "it paused at least once before giving up");
    }
}
