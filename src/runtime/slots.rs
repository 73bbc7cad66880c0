//! A runtime's call slots: at most `n` calls run in it at once; the rest
//! wait in one queue per caller, and a freed slot goes to the callers in
//! turn (round-robin), so one caller's burst delays another caller's single
//! call by about one round of slots, not by the whole burst. A nested call
//! (a handler calling its own runtime) never queues: it takes a free slot
//! at once or is refused, because the slot it would wait for may be held by
//! the very call waiting on it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Who a queued call belongs to: the caller's worker id on the bus (or
/// anything that tells callers apart).
pub(crate) type CallerKey = String;

#[derive(Default)]
struct Queues {
    free: usize,
    /// Callers with calls waiting, in the order they are served; each
    /// caller's calls in arrival order.
    waiting: VecDeque<(CallerKey, VecDeque<oneshot::Sender<SlotPermit>>)>,
}

/// The slots of one runtime.
pub(crate) struct Slots {
    size: usize,
    queues: Mutex<Queues>,
}

/// One slot, held until dropped.
pub(crate) struct SlotPermit {
    slots: Arc<Slots>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.slots.release();
    }
}

impl Slots {
    pub(crate) fn new(size: usize) -> Arc<Slots> {
        let size = size.max(1);
        Arc::new(Slots {
            size,
            queues: Mutex::new(Queues {
                free: size,
                waiting: VecDeque::new(),
            }),
        })
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn permit(self: &Arc<Self>) -> SlotPermit {
        SlotPermit {
            slots: self.clone(),
        }
    }

    /// A slot for one call of `caller`, waiting its turn when none is free.
    pub(crate) async fn acquire(self: &Arc<Self>, caller: &str) -> SlotPermit {
        loop {
            let rx = {
                let mut q = self.lock();
                if q.free > 0 && q.waiting.is_empty() {
                    q.free -= 1;
                    return self.permit();
                }
                let (tx, rx) = oneshot::channel();
                match q.waiting.iter_mut().find(|(c, _)| c == caller) {
                    Some((_, calls)) => calls.push_back(tx),
                    None => q
                        .waiting
                        .push_back((caller.to_string(), VecDeque::from([tx]))),
                }
                rx
            };
            // A release sends a permit or, seeing this receiver gone,
            // drops the sender; so an error cannot reach a live waiter.
            if let Ok(permit) = rx.await {
                return permit;
            }
        }
    }

    /// A slot now, without queueing (a nested call); `None` when every
    /// slot is held or others are waiting for one.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<SlotPermit> {
        let mut q = self.lock();
        if q.free > 0 && q.waiting.is_empty() {
            q.free -= 1;
            return Some(self.permit());
        }
        None
    }

    /// Calls running now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.size - self.lock().free
    }

    /// A slot came free: it goes to the next caller in turn (its oldest
    /// call), and that caller goes to the back of the line. A permit sent
    /// to a waiter that gave up meanwhile comes back through its drop.
    fn release(self: &Arc<Self>) {
        let tx = {
            let mut q = self.lock();
            loop {
                let Some((caller, mut calls)) = q.waiting.pop_front() else {
                    q.free += 1;
                    return;
                };
                let Some(tx) = calls.pop_front() else {
                    continue;
                };
                if !calls.is_empty() {
                    q.waiting.push_back((caller, calls));
                }
                if !tx.is_closed() {
                    break tx;
                }
            }
        };
        // Outside the lock: a permit that cannot be delivered is dropped
        // here, and its drop releases the slot again.
        drop(tx.send(self.permit()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn soon<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(200), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn at_most_n_run_and_the_rest_wait() {
        let s = Slots::new(2);
        let a = s.acquire("x").await;
        let _b = s.acquire("x").await;
        assert_eq!(s.held(), 2);
        assert!(s.try_acquire().is_none(), "none free");
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.acquire("x").await }
        });
        let queued = async {
            while s.lock().waiting.is_empty() {
                tokio::task::yield_now().await
            }
        };
        assert!(soon(queued).await.is_some());
        drop(a);
        let c = soon(waiting)
            .await
            .expect("served once a slot is free")
            .unwrap();
        assert_eq!(s.held(), 2);
        drop(c);
        assert_eq!(s.held(), 1);
    }
}

#[cfg(test)]
mod fairness {
    use super::*;

    /// Queues `n` calls of `caller`, each reporting `(caller, i)` on `done`
    /// once it holds a slot (and releasing it at once).
    fn queue(
        s: &Arc<Slots>,
        caller: &'static str,
        n: usize,
        done: &tokio::sync::mpsc::UnboundedSender<(&'static str, usize)>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..n)
            .map(|i| {
                let (s, done) = (s.clone(), done.clone());
                tokio::spawn(async move {
                    let _p = s.acquire(caller).await;
                    let _ = done.send((caller, i));
                })
            })
            .collect()
    }

    async fn all_queued(s: &Slots, n: usize) {
        while s.lock().waiting.iter().map(|(_, c)| c.len()).sum::<usize>() < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_does_not_hold_back_another_callers_single_call() {
        let s = Slots::new(1);
        let first = s.acquire("burst").await;
        let (done, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = queue(&s, "burst", 10, &done);
        all_queued(&s, 10).await;
        tasks.extend(queue(&s, "single", 1, &done));
        all_queued(&s, 11).await;
        drop(first);
        let mut seen = Vec::new();
        for _ in 0..11 {
            seen.push(order.recv().await.unwrap());
        }
        let at = seen.iter().position(|(c, _)| *c == "single").unwrap();
        assert_eq!(
            at, 1,
            "one round of the burst, then the single call: {seen:?}"
        );
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(s.held(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiter_that_gave_up_loses_nothing() {
        let s = Slots::new(1);
        let first = s.acquire("a").await;
        let gave_up = tokio::spawn({
            let s = s.clone();
            async move {
                let _ = s.acquire("b").await;
            }
        });
        all_queued(&s, 1).await;
        gave_up.abort();
        let _ = gave_up.await;
        drop(first);
        assert_eq!(s.held(), 0, "the slot came back");
        assert!(s.try_acquire().is_some());
    }
}
