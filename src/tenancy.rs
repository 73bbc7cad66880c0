//! Guest tenancy: which lineage a guest belongs to, what its lineage owns,
//! and how much of the daemon it may hold at once.
//!
//! A *lineage* is the tree of guest work rooted at one trusted call: a
//! top-level `run` (one-shot or kept) or a `register_function` that created
//! a namespace runtime, both from the main listener. Every guest token
//! carries its lineage and the nesting depth of the code it runs; what guest
//! code creates through the worker (a nested run, a kept runtime, a
//! namespace) joins the same lineage one level deeper, and is *owned* by it.
//! What a trusted caller creates is owned by no lineage, so no guest may
//! register into it or tear it down by name.
//!
//! The budget is per lineage, so one tenant's fan-out cannot fill the
//! daemon's slots: at most `guest_max_concurrent_runs` VMs started by its
//! guests at once (in-flight runs, plus the kept and namespace runtimes they
//! created, for as long as those live), and nesting at most
//! `guest_max_run_depth` deep. Calls from the main listener are never
//! counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::WorkerError;

/// One lineage's id. Not a capability (the engine keeps it in the guest
/// connection's auth context, out of the guest's reach), but never shown
/// to anyone either: it would tie tenants' runs together.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Lineage(Arc<str>);

impl Lineage {
    /// A fresh lineage for a trusted call.
    pub fn fresh() -> Lineage {
        Lineage(format!("ln-{:032x}", rand::random::<u128>()).into())
    }

    /// The lineage named in an auth context the worker itself issued.
    pub fn from_context(s: &str) -> Lineage {
        Lineage(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Lineage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lineage(<redacted>)")
    }
}

/// Who makes a call into the worker.
#[derive(Clone, Debug)]
pub enum Caller {
    /// The main listener: operators, agents, other workers. Seed 000's
    /// contract, word for word.
    Trusted,
    /// Guest code, through the guest listener's middleware.
    Guest(Guest),
}

/// A guest: its lineage and the depth its code runs at (0 for the code of
/// a trusted call's run or namespace).
#[derive(Clone, Debug)]
pub struct Guest {
    pub lineage: Lineage,
    pub depth: u32,
}

impl Caller {
    /// The guest's lineage, if the caller is one.
    pub fn lineage(&self) -> Option<&Lineage> {
        match self {
            Caller::Trusted => None,
            Caller::Guest(g) => Some(&g.lineage),
        }
    }

    /// Whether something owned by `owner` is this caller's to change:
    /// everything is a trusted caller's; a guest's only what its lineage owns.
    pub fn may_change(&self, owner: Option<&Lineage>) -> bool {
        match self {
            Caller::Trusted => true,
            Caller::Guest(g) => owner == Some(&g.lineage),
        }
    }
}

/// What a VM started for a caller gets: the lineage and depth its guests
/// run at, who owns it, and (for a guest caller) the budget slot it holds.
pub struct Admission {
    pub lineage: Lineage,
    pub depth: u32,
    pub owner: Option<Lineage>,
    pub permit: Option<RunPermit>,
    /// For a trusted caller: what keeps its lineage alive. Whoever holds
    /// it (the one-shot run, or the runtime it created) drops it when it
    /// ends, and the lineage's runtimes end with it.
    pub root: Option<Permit>,
}

/// The per-lineage limits, and the ceiling of every lineage together.
#[derive(Debug, Clone, Copy)]
pub struct TenantLimits {
    pub max_concurrent_runs: usize,
    pub max_depth: u32,
    /// VMs guest code of all tenants together may hold
    /// (`guest_max_share` of `daemon_max_sandboxes`).
    pub max_guest_vms: usize,
}

/// Why a guest may not start another VM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    #[error(
        "this tenant already holds {limit} VMs started by guest code (guest_max_concurrent_runs); \
         wait for a run to finish or tear down a runtime it kept"
    )]
    Concurrency { limit: usize },
    #[error(
        "guest code of all tenants already holds {limit} VMs, its share of the daemon \
         (guest_max_share of daemon_max_sandboxes); the rest is kept for trusted callers"
    )]
    Share { limit: usize },
    #[error("guest runs nest at most {limit} deep (guest_max_run_depth)")]
    Depth { limit: u32 },
    #[error(
        "this tenant already has {limit} calls waiting on sandbox-code-runner's handlers \
         (guest_max_concurrent_runs); each runtime runs one call at a time"
    )]
    Calls { limit: usize },
}

impl From<TenantRefusal> for WorkerError {
    fn from(r: TenantRefusal) -> WorkerError {
        WorkerError::Capacity(r.to_string())
    }
}

/// How many slots of one kind (VMs, or calls in flight) each lineage holds.
#[derive(Default)]
struct Counter(Mutex<HashMap<Lineage, usize>>);

impl Counter {
    /// One more slot for `lineage`, unless it holds `limit` already.
    fn take(self: &Arc<Self>, lineage: &Lineage, limit: usize) -> Option<Permit> {
        let mut held = lock(&self.0);
        let n = held.entry(lineage.clone()).or_default();
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(Permit {
            lineage: lineage.clone(),
            counter: self.clone(),
        })
    }

    fn held(&self, lineage: &Lineage) -> usize {
        lock(&self.0).get(lineage).copied().unwrap_or(0)
    }
}

/// One slot of a lineage's budget; given back when dropped.
pub struct Permit {
    lineage: Lineage,
    counter: Arc<Counter>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut held = lock(&self.counter.0);
        if let Some(n) = held.get_mut(&self.lineage) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.lineage);
            }
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

/// One VM of a lineage's budget, and of every guest's share of the daemon.
#[derive(Debug)]
pub struct RunPermit {
    _lineage: Permit,
    _share: Permit,
}
/// One guest call in flight to a published handler.
pub type CallPermit = Permit;

/// The per-lineage budget. Cheap to share.
pub struct Tenants {
    limits: TenantLimits,
    /// VMs started by each lineage's guests.
    held: Arc<Counter>,
    /// VMs started by any guest, under one key.
    share: Arc<Counter>,
    /// Live roots (trusted runs and runtimes) per lineage: one at most.
    roots: Arc<Counter>,
    /// Guest calls in flight to this worker's published handlers, per
    /// lineage: each namespace runtime serves one call at a time, so one
    /// tenant queueing many would stall another's calls behind them.
    calls: Arc<Counter>,
}

/// The one key the share of every guest is counted under (lineages are
/// `ln-<hex>`, so it is nobody's).
fn every_guest() -> Lineage {
    Lineage("every-guest".into())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tenants {
    pub fn new(limits: TenantLimits) -> Arc<Tenants> {
        Arc::new(Tenants {
            limits,
            held: Arc::default(),
            share: Arc::default(),
            roots: Arc::default(),
            calls: Arc::default(),
        })
    }

    /// Admits a new VM for `caller`: a trusted caller roots a fresh lineage
    /// and is never counted; a guest's VM joins its lineage one level
    /// deeper, within both limits.
    pub fn admit(&self, caller: &Caller) -> Result<Admission, TenantRefusal> {
        let g = match caller {
            Caller::Trusted => {
                let lineage = Lineage::fresh();
                return Ok(Admission {
                    root: self.roots.take(&lineage, 1),
                    lineage,
                    depth: 0,
                    owner: None,
                    permit: None,
                });
            }
            Caller::Guest(g) => g,
        };
        let depth = g.depth.saturating_add(1);
        if depth > self.limits.max_depth {
            return Err(TenantRefusal::Depth {
                limit: self.limits.max_depth,
            });
        }
        let limit = self.limits.max_concurrent_runs;
        let lineage = self
            .held
            .take(&g.lineage, limit)
            .ok_or(TenantRefusal::Concurrency { limit })?;
        let limit = self.limits.max_guest_vms;
        let share = self
            .share
            .take(&every_guest(), limit)
            .ok_or(TenantRefusal::Share { limit })?;
        Ok(Admission {
            lineage: g.lineage.clone(),
            depth,
            owner: Some(g.lineage.clone()),
            permit: Some(RunPermit {
                _lineage: lineage,
                _share: share,
            }),
            root: None,
        })
    }

    /// Admits one more call of `guest` to a published handler, within the
    /// same bound as its VMs.
    pub fn admit_call(&self, guest: &Guest) -> Result<CallPermit, TenantRefusal> {
        let limit = self.limits.max_concurrent_runs;
        self.calls
            .take(&guest.lineage, limit)
            .ok_or(TenantRefusal::Calls { limit })
    }

    /// Whether the trusted run or runtime `lineage` grew from still lives.
    pub fn root_alive(&self, lineage: &Lineage) -> bool {
        self.roots.held(lineage) > 0
    }

    /// VMs guest code of every lineage holds now.
    pub fn guest_vms(&self) -> usize {
        self.share.held(&every_guest())
    }

    /// VMs `lineage` holds now (for tests and leak checks).
    pub fn held(&self, lineage: &Lineage) -> usize {
        self.held.held(lineage)
    }

    /// Lineages holding anything (for tests and leak checks).
    pub fn active(&self) -> usize {
        lock(&self.held.0).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(l: &Lineage, depth: u32) -> Caller {
        Caller::Guest(Guest {
            lineage: l.clone(),
            depth,
        })
    }

    fn tenants(runs: usize, depth: u32) -> Arc<Tenants> {
        Tenants::new(TenantLimits {
            max_concurrent_runs: runs,
            max_depth: depth,
            max_guest_vms: 64,
        })
    }

    #[test]
    fn every_guest_together_holds_at_most_its_share() {
        let t = Tenants::new(TenantLimits {
            max_concurrent_runs: 2,
            max_depth: 4,
            max_guest_vms: 3,
        });
        let lineages: Vec<Lineage> = (0..3).map(|_| Lineage::fresh()).collect();
        let a = t.admit(&guest(&lineages[0], 0)).unwrap();
        let _b = t.admit(&guest(&lineages[0], 0)).unwrap();
        let _c = t.admit(&guest(&lineages[1], 0)).unwrap();
        assert_eq!(
            t.admit(&guest(&lineages[2], 0)).err(),
            Some(TenantRefusal::Share { limit: 3 })
        );
        assert_eq!(t.held(&lineages[2]), 0, "a refused admission holds nothing");
        assert!(
            t.admit(&Caller::Trusted).is_ok(),
            "trusted callers are never counted"
        );
        drop(a);
        assert_eq!(t.guest_vms(), 2);
        assert!(t.admit(&guest(&lineages[2], 0)).is_ok());
    }

    #[test]
    fn trusted_calls_root_fresh_lineages_and_are_never_counted() {
        let t = tenants(1, 1);
        let a = t.admit(&Caller::Trusted).unwrap();
        let b = t.admit(&Caller::Trusted).unwrap();
        assert_ne!(a.lineage, b.lineage);
        assert_eq!(
            (a.depth, a.owner.is_none(), a.permit.is_none()),
            (0, true, true)
        );
        assert_eq!(t.active(), 0);
        assert!(t.root_alive(&a.lineage));
        let l = a.lineage.clone();
        drop(a);
        assert!(!t.root_alive(&l), "a lineage ends with its root");
    }

    #[test]
    fn a_lineage_holds_at_most_its_limit_and_permits_come_back() {
        let t = tenants(2, 4);
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        let p1 = t.admit(&guest(&a, 0)).unwrap();
        let _p2 = t.admit(&guest(&a, 0)).unwrap();
        assert_eq!(
            t.admit(&guest(&a, 0)).err(),
            Some(TenantRefusal::Concurrency { limit: 2 })
        );
        // Another tenant is not starved by the first.
        let _q = t.admit(&guest(&b, 0)).unwrap();
        assert_eq!(p1.owner.as_ref(), Some(&a));
        assert_eq!(p1.depth, 1);
        drop(p1);
        assert_eq!(t.held(&a), 1);
        assert!(t.admit(&guest(&a, 0)).is_ok());
    }

    #[test]
    fn a_lineage_has_at_most_its_limit_of_handler_calls_in_flight() {
        let t = tenants(2, 4);
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        let ga = Guest {
            lineage: a.clone(),
            depth: 0,
        };
        let gb = Guest {
            lineage: b,
            depth: 0,
        };
        let c1 = t.admit_call(&ga).unwrap();
        let _c2 = t.admit_call(&ga).unwrap();
        assert!(matches!(
            t.admit_call(&ga),
            Err(TenantRefusal::Calls { limit: 2 })
        ));
        assert!(t.admit_call(&gb).is_ok(), "another tenant is not starved");
        drop(c1);
        assert!(t.admit_call(&ga).is_ok());
        assert_eq!(t.held(&a), 0, "calls are not VMs");
    }

    #[test]
    fn nesting_stops_at_the_depth_limit() {
        let t = tenants(8, 2);
        let l = Lineage::fresh();
        assert_eq!(t.admit(&guest(&l, 1)).unwrap().depth, 2);
        assert_eq!(
            t.admit(&guest(&l, 2)).err(),
            Some(TenantRefusal::Depth { limit: 2 })
        );
        assert_eq!(t.held(&l), 0, "a refused admission holds nothing");
    }

    #[test]
    fn guests_change_only_what_their_lineage_owns() {
        let (a, b) = (Lineage::fresh(), Lineage::fresh());
        assert!(Caller::Trusted.may_change(None));
        assert!(Caller::Trusted.may_change(Some(&a)));
        assert!(guest(&a, 0).may_change(Some(&a)));
        assert!(!guest(&a, 0).may_change(Some(&b)));
        assert!(!guest(&a, 0).may_change(None));
    }

    #[test]
    fn lineages_never_print() {
        let l = Lineage::fresh();
        assert!(!format!("{l:?}").contains(l.as_str()));
        assert!(!format!("{:?}", guest(&l, 0)).contains(l.as_str()));
    }
}
