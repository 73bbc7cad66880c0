//! The warm pool's bookkeeping: which pre-booted VMs are ready per language,
//! how many are warming, and whether the pool is closed. The manager does
//! the `sandbox::*` work; this type only decides.
//!
//! A pooled VM serves exactly one run or one runtime, then is stopped like
//! any other: the pool is never shared between tenants.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ids::Lang;

#[derive(Default)]
struct PoolState {
    ready: HashMap<Lang, VecDeque<String>>,
    warming: HashMap<Lang, usize>,
    closed: bool,
}

/// Ready and warming VMs, per language.
pub(crate) struct WarmPool {
    size: usize,
    state: Mutex<PoolState>,
    settled: tokio::sync::Notify,
}

impl WarmPool {
    pub fn new(size: usize) -> WarmPool {
        WarmPool {
            size,
            state: Mutex::new(PoolState::default()),
            settled: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands a ready VM to its one tenant.
    pub fn take(&self, lang: Lang) -> Option<String> {
        self.lock()
            .ready
            .get_mut(&lang)
            .and_then(VecDeque::pop_front)
    }

    /// How many VMs to start warming now for `lang`; they are counted as
    /// warming from here on.
    pub(crate) fn reserve(&self, lang: Lang) -> usize {
        let mut st = self.lock();
        if st.closed {
            return 0;
        }
        let ready = st.ready.get(&lang).map_or(0, VecDeque::len);
        let warming = st.warming.get(&lang).copied().unwrap_or(0);
        let missing = self.size.saturating_sub(ready + warming);
        *st.warming.entry(lang).or_default() += missing;
        missing
    }

    /// A warming VM finished: `Some(id)` joins the pool, `None` failed.
    /// Returns the id back when the pool closed meanwhile: the caller stops it.
    pub fn arrive(&self, lang: Lang, vm: Option<String>) -> Option<String> {
        let mut st = self.lock();
        if let Some(w) = st.warming.get_mut(&lang) {
            *w = w.saturating_sub(1);
        }
        let back = match vm {
            Some(id) if st.closed => Some(id),
            Some(id) => {
                st.ready.entry(lang).or_default().push_back(id);
                None
            }
            None => None,
        };
        drop(st);
        self.settled.notify_waiters();
        back
    }

    /// Empties the ready VMs (capacity pressure): the caller stops them.
    pub fn drain(&self) -> Vec<String> {
        let mut st = self.lock();
        st.ready.values_mut().flat_map(|q| q.drain(..)).collect()
    }

    /// Closes the pool for good and empties it.
    pub fn close(&self) -> Vec<String> {
        self.lock().closed = true;
        self.drain()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until no VM is warming (after `close`, for a complete shutdown).
    pub async fn settle(&self, deadline: std::time::Duration) {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.settled.notified();
            if self.lock().warming.values().all(|w| *w == 0) {
                return;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return;
            }
        }
    }

    /// VMs of `lang` being booted for the pool right now.
    pub fn warming(&self, lang: Lang) -> usize {
        self.lock().warming.get(&lang).copied().unwrap_or(0)
    }

    /// Ready VMs per language, for tests and stats.
    pub fn ready(&self, lang: Lang) -> usize {
        self.lock().ready.get(&lang).map_or(0, VecDeque::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_fills_to_size_and_counts_warming() {
        let p = WarmPool::new(2);
        assert_eq!(p.reserve(Lang::Node), 2);
        assert_eq!(p.reserve(Lang::Node), 0, "warming VMs count");
        assert_eq!(p.arrive(Lang::Node, Some("a".into())), None);
        assert_eq!(p.arrive(Lang::Node, None), None);
        assert_eq!(p.ready(Lang::Node), 1);
        assert_eq!(p.reserve(Lang::Node), 1);
        assert_eq!(p.reserve(Lang::Python), 2, "languages are separate");
    }

    #[test]
    fn take_is_fifo_and_single_use() {
        let p = WarmPool::new(2);
        p.reserve(Lang::Python);
        p.arrive(Lang::Python, Some("a".into()));
        p.arrive(Lang::Python, Some("b".into()));
        assert_eq!(p.take(Lang::Python).as_deref(), Some("a"));
        assert_eq!(p.take(Lang::Python).as_deref(), Some("b"));
        assert_eq!(p.take(Lang::Python), None);
        assert_eq!(p.take(Lang::Node), None);
    }

    #[test]
    fn a_closed_pool_hands_arrivals_back() {
        let p = WarmPool::new(1);
        p.reserve(Lang::Node);
        p.reserve(Lang::Python);
        p.arrive(Lang::Python, Some("p".into()));
        assert_eq!(p.close(), vec!["p".to_string()]);
        assert_eq!(p.arrive(Lang::Node, Some("n".into())).as_deref(), Some("n"));
        assert_eq!(p.reserve(Lang::Node), 0);
    }

    #[test]
    fn size_zero_never_warms() {
        let p = WarmPool::new(0);
        assert_eq!(p.reserve(Lang::Node), 0);
        assert_eq!(p.take(Lang::Node), None);
    }
}
