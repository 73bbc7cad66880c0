//! One runtime's bookkeeping: what an operator may see of it (its random
//! handle, when it was created and last used, how many executions and how
//! long), kept on the record and read by the inventory and the events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::events::now_ms;

/// Bookkeeping an operator may see: created, last used, executions.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(super) handle: String,
    pub(super) created_ms: u64,
    pub(super) last_used_ms: AtomicU64,
    pub(super) executions: AtomicU64,
    pub(super) exec_us: AtomicU64,
}

impl Meta {
    pub(crate) fn new() -> Meta {
        let now = now_ms();
        Meta {
            handle: format!("h-{:016x}", rand::random::<u64>()),
            created_ms: now,
            last_used_ms: AtomicU64::new(now),
            executions: AtomicU64::new(0),
            exec_us: AtomicU64::new(0),
        }
    }

    /// One execution of `took` finished now.
    pub(crate) fn used(&self, took: Duration) {
        self.executions.fetch_add(1, Ordering::Relaxed);
        self.exec_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.last_used_ms.fetch_max(now_ms(), Ordering::Relaxed);
    }
}

/// Keeps an execution's duration on its runtime's record.
pub(crate) struct Timed<'a>(&'a Meta, std::time::Instant);

impl<'a> Timed<'a> {
    pub(crate) fn start(meta: &'a Meta) -> Timed<'a> {
        Timed(meta, std::time::Instant::now())
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        self.0.used(self.1.elapsed());
    }
}
