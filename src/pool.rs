//! The warm pool's bookkeeping: which pre-booted VMs are ready per language,
//! how many are warming, and whether the pool is closed. The manager does
//! the `sandbox::*` work; this type only decides.
//!
//! A pooled VM serves exactly one run or one runtime, then is stopped like
//! any other: the pool is never shared between tenants. A pooled python VM
//! may already hold the guest SDK (planted before any tenant code ran), so
//! runs that use `iii` prefer those and runs that do not leave them.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ids::Lang;

/// One pre-booted VM, and whether the guest SDK is already in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PooledVm {
    pub id: String,
    pub sdk: bool,
}

impl PooledVm {
    pub fn bare(id: impl Into<String>) -> PooledVm {
        PooledVm {
            id: id.into(),
            sdk: false,
        }
    }
}

#[derive(Default)]
struct PoolState {
    ready: HashMap<Lang, VecDeque<PooledVm>>,
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

    /// Hands a ready VM to its one tenant: one whose SDK state is `sdk` if
    /// there is one (the oldest such), else the oldest.
    pub fn take(&self, lang: Lang, sdk: bool) -> Option<PooledVm> {
        let mut st = self.lock();
        let q = st.ready.get_mut(&lang)?;
        let at = q.iter().position(|vm| vm.sdk == sdk).unwrap_or(0);
        q.remove(at)
    }

    /// Takes the ready VMs of `lang` that lack the SDK, to plant it in them
    /// while no tenant holds them. They count as warming until they
    /// `arrive` again.
    pub fn take_without_sdk(&self, lang: Lang) -> Vec<String> {
        let mut st = self.lock();
        if st.closed {
            return Vec::new();
        }
        let Some(q) = st.ready.get_mut(&lang) else {
            return Vec::new();
        };
        let (bare, keep): (VecDeque<PooledVm>, VecDeque<PooledVm>) =
            q.drain(..).partition(|vm| !vm.sdk);
        *q = keep;
        let n = bare.len();
        *st.warming.entry(lang).or_default() += n;
        bare.into_iter().map(|vm| vm.id).collect()
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

    /// A warming VM finished: `Some(vm)` joins the pool, `None` failed.
    /// Returns the id back when the pool closed meanwhile: the caller stops it.
    pub fn arrive(&self, lang: Lang, vm: Option<PooledVm>) -> Option<String> {
        let mut st = self.lock();
        if let Some(w) = st.warming.get_mut(&lang) {
            *w = w.saturating_sub(1);
        }
        let back = match vm {
            Some(vm) if st.closed => Some(vm.id),
            Some(vm) => {
                st.ready.entry(lang).or_default().push_back(vm);
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
        st.ready
            .values_mut()
            .flat_map(|q| q.drain(..))
            .map(|vm| vm.id)
            .collect()
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
        crate::notified::until(&self.settled, deadline, || {
            self.lock().warming.values().all(|w| *w == 0)
        })
        .await;
    }

    /// VMs of `lang` being booted for the pool right now.
    pub fn warming(&self, lang: Lang) -> usize {
        self.lock().warming.get(&lang).copied().unwrap_or(0)
    }

    /// Ready VMs per language, for tests and stats.
    pub fn ready(&self, lang: Lang) -> usize {
        self.lock().ready.get(&lang).map_or(0, VecDeque::len)
    }

    /// Ready VMs of `lang` that already hold the guest SDK.
    pub fn ready_with_sdk(&self, lang: Lang) -> usize {
        self.lock()
            .ready
            .get(&lang)
            .map_or(0, |q| q.iter().filter(|vm| vm.sdk).count())
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
        assert_eq!(p.arrive(Lang::Node, Some(PooledVm::bare("a"))), None);
        assert_eq!(p.arrive(Lang::Node, None), None);
        assert_eq!(p.ready(Lang::Node), 1);
        assert_eq!(p.reserve(Lang::Node), 1);
        assert_eq!(p.reserve(Lang::Python), 2, "languages are separate");
    }

    #[test]
    fn take_is_fifo_and_single_use() {
        let p = WarmPool::new(2);
        p.reserve(Lang::Python);
        p.arrive(Lang::Python, Some(PooledVm::bare("a")));
        p.arrive(Lang::Python, Some(PooledVm::bare("b")));
        assert_eq!(
            p.take(Lang::Python, false).map(|vm| vm.id).as_deref(),
            Some("a")
        );
        assert_eq!(
            p.take(Lang::Python, false).map(|vm| vm.id).as_deref(),
            Some("b")
        );
        assert_eq!(p.take(Lang::Python, false), None);
        assert_eq!(p.take(Lang::Node, true), None);
    }

    #[test]
    fn a_closed_pool_hands_arrivals_back() {
        let p = WarmPool::new(1);
        p.reserve(Lang::Node);
        p.reserve(Lang::Python);
        p.arrive(Lang::Python, Some(PooledVm::bare("p")));
        assert_eq!(p.close(), vec!["p".to_string()]);
        assert_eq!(
            p.arrive(Lang::Node, Some(PooledVm::bare("n"))).as_deref(),
            Some("n")
        );
        assert_eq!(p.reserve(Lang::Node), 0);
    }

    #[test]
    fn size_zero_never_warms() {
        let p = WarmPool::new(0);
        assert_eq!(p.reserve(Lang::Node), 0);
        assert_eq!(p.take(Lang::Node, true), None);
    }

    #[test]
    fn runs_that_use_iii_prefer_a_vm_with_the_sdk_and_others_leave_it() {
        let p = WarmPool::new(3);
        p.reserve(Lang::Python);
        let sdk = |id: &str| PooledVm {
            id: id.into(),
            sdk: true,
        };
        p.arrive(Lang::Python, Some(PooledVm::bare("a")));
        p.arrive(Lang::Python, Some(sdk("b")));
        p.arrive(Lang::Python, Some(PooledVm::bare("c")));
        assert_eq!(p.ready_with_sdk(Lang::Python), 1);
        assert_eq!(p.take(Lang::Python, true), Some(sdk("b")));
        assert_eq!(
            p.take(Lang::Python, true).map(|vm| vm.id).as_deref(),
            Some("a"),
            "else the oldest"
        );
        p.reserve(Lang::Python);
        p.arrive(Lang::Python, Some(sdk("d")));
        assert_eq!(
            p.take(Lang::Python, false).map(|vm| vm.id).as_deref(),
            Some("c"),
            "a plain run leaves the planted VM"
        );
        assert_eq!(p.ready_with_sdk(Lang::Python), 1);
    }

    #[test]
    fn vms_taken_for_planting_count_as_warming_until_they_return() {
        let p = WarmPool::new(2);
        assert_eq!(p.reserve(Lang::Python), 2);
        p.arrive(Lang::Python, Some(PooledVm::bare("a")));
        p.arrive(
            Lang::Python,
            Some(PooledVm {
                id: "b".into(),
                sdk: true,
            }),
        );
        assert_eq!(p.take_without_sdk(Lang::Python), vec!["a".to_string()]);
        assert_eq!(p.ready(Lang::Python), 1);
        assert_eq!(p.warming(Lang::Python), 1);
        assert_eq!(
            p.reserve(Lang::Python),
            0,
            "no refill for a VM being planted"
        );
        p.arrive(
            Lang::Python,
            Some(PooledVm {
                id: "a".into(),
                sdk: true,
            }),
        );
        assert_eq!(p.ready_with_sdk(Lang::Python), 2);
        assert!(p.take_without_sdk(Lang::Python).is_empty());
        p.close();
        assert!(p.take_without_sdk(Lang::Node).is_empty());
    }
}
