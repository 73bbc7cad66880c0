//! Waiting on an observable condition with a deadline: the one way tests
//! and benches here synchronize (never a fixed sleep).

use std::future::Future;
use std::time::Duration;

/// Polls `probe` until it returns true (→ true) or `deadline` passes (→ false).
pub async fn until<F, Fut>(deadline: Duration, mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if probe().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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
}
