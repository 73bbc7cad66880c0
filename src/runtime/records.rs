//! Runtime records and the manager's shared state: which VMs this worker
//! holds, for whom, and under which name, so shutdown and the orphan sweep
//! are complete.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::guest_access::TokenLease;
use crate::ids::{Lang, Namespace, RuntimeId};
use crate::tenancy::{Admission, Lineage, Permit, RunPermit};

use super::inventory;

/// Whether the guest SDK is in a runtime yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SdkState {
    Absent,
    /// Planted or installed (or tried and failed: the wrapper then raises a
    /// clear "not installed" error on first use, and we do not retry per call).
    Prepared,
}

/// What only the holder of a runtime's exec slot may touch.
pub(super) struct Slot {
    pub(super) sdk: SdkState,
    /// No tenant code has run in the VM yet: what it installs may be archived.
    pub(super) pristine: bool,
}

/// One VM that outlives a call: a kept run's, or a namespace's.
pub(super) struct Runtime {
    pub(super) id: RuntimeId,
    pub(super) sandbox_id: String,
    pub(super) lang: Lang,
    pub(super) namespace: Option<Namespace>,
    /// One exec at a time: the VM's single slot.
    pub(super) slot: tokio::sync::Mutex<Slot>,
    /// Published function id → module path inside the VM.
    pub(super) functions: Mutex<HashMap<String, String>>,
    /// Its guests' token on the guest listener; revoked when it is forgotten.
    pub(super) token: Mutex<Option<TokenLease>>,
    /// The lineage that owns it (guest code created it), or none (a
    /// trusted caller did).
    pub(super) owner: Option<Lineage>,
    /// The slot of its owner's budget it holds while it lives.
    pub(super) permit: Mutex<Option<RunPermit>>,
    /// The lineage its guests belong to.
    pub(super) lineage: Lineage,
    /// Set by the first `forget`: a runtime leaves the ledger once, however
    /// many paths (teardown, expiry, its lineage's end, shutdown) race.
    pub(super) forgotten: std::sync::atomic::AtomicBool,
    /// For a trusted caller's runtime: its lineage's life (see
    /// `Admission::root`).
    pub(super) root: Mutex<Option<Permit>>,
    /// What the inventory shows: handle, created, last used, executions.
    pub(super) meta: inventory::Meta,
}

impl Runtime {
    pub(super) fn new(
        id: RuntimeId,
        sandbox_id: String,
        lang: Lang,
        namespace: Option<Namespace>,
        sdk: SdkState,
        token: Option<TokenLease>,
        admitted: Admission,
    ) -> Arc<Runtime> {
        // A namespace VM runs tenant code only once a handler is checked;
        // a kept VM already ran its first run.
        let pristine = namespace.is_some();
        Arc::new(Runtime {
            id,
            sandbox_id,
            lang,
            namespace,
            slot: tokio::sync::Mutex::new(Slot { sdk, pristine }),
            functions: Mutex::new(HashMap::new()),
            token: Mutex::new(token),
            owner: admitted.owner,
            permit: Mutex::new(admitted.permit),
            lineage: admitted.lineage,
            forgotten: Default::default(),
            root: Mutex::new(admitted.root),
            meta: inventory::Meta::new(),
        })
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.id)
            .field("lang", &self.lang)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Everything the manager holds, behind one lock: the ledger of this
/// worker's VMs. Its fields are private and every move is a method, so
/// every VM the worker created and the daemon has not confirmed gone is in
/// exactly one place at every instant: a runtime record, or the transient
/// ledger (calls in flight that no record holds yet, and VMs being
/// stopped). The warm pool's VMs are the pool's; they move into the ledger
/// under this lock ([`State::track`]).
#[derive(Default)]
pub(super) struct State {
    runtimes: HashMap<RuntimeId, Arc<Runtime>>,
    namespaces: HashMap<(Namespace, Lang), RuntimeId>,
    /// Published function id → the runtime serving it.
    functions: HashMap<String, RuntimeId>,
    /// Function ids mid-registration, so two registrations cannot both win.
    reserved: HashSet<String>,
    /// The transient ledger.
    transient: HashSet<String>,
}

/// What becomes of a released runtime's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VmFate {
    /// It is about to be stopped: it stays in the transient ledger until
    /// the stop has finished ([`State::gone`]), so a shutdown meanwhile
    /// still sees it.
    Stopping,
    /// The daemon already dropped it (reaped).
    Gone,
}

impl State {
    /// A VM no record holds: just created for a call, taken from the pool,
    /// or about to be stopped.
    pub(super) fn track(&mut self, sandbox_id: &str) {
        self.transient.insert(sandbox_id.to_string());
    }

    /// The daemon confirmed the VM gone (stopped or reaped).
    pub(super) fn gone(&mut self, sandbox_id: &str) {
        self.transient.remove(sandbox_id);
    }

    /// A tracked VM becomes `rt`'s, and its namespace's when it serves one.
    pub(super) fn adopt(&mut self, rt: Arc<Runtime>) {
        self.transient.remove(&rt.sandbox_id);
        if let Some(ns) = &rt.namespace {
            self.namespaces.insert((ns.clone(), rt.lang), rt.id.clone());
        }
        self.runtimes.insert(rt.id.clone(), rt);
    }

    /// Drops `rt`'s record and its functions (`fns`); its VM goes back to
    /// the transient ledger unless the daemon already dropped it.
    pub(super) fn release(&mut self, rt: &Runtime, fns: &[String], fate: VmFate) {
        if self.runtimes.remove(&rt.id).is_none() {
            return;
        }
        if let Some(ns) = &rt.namespace {
            let key = (ns.clone(), rt.lang);
            if self.namespaces.get(&key) == Some(&rt.id) {
                self.namespaces.remove(&key);
            }
        }
        for f in fns {
            self.functions.remove(f);
        }
        if fate == VmFate::Stopping {
            self.transient.insert(rt.sandbox_id.clone());
        }
    }

    pub(super) fn runtime(&self, id: &RuntimeId) -> Option<Arc<Runtime>> {
        self.runtimes.get(id).cloned()
    }

    /// The runtime of one (namespace, language).
    pub(super) fn namespace_runtime(&self, ns: &Namespace, lang: Lang) -> Option<Arc<Runtime>> {
        self.namespaces
            .get(&(ns.clone(), lang))
            .and_then(|id| self.runtimes.get(id))
            .cloned()
    }

    /// Every runtime of `ns`, whatever its language.
    pub(super) fn in_namespace(&self, ns: &Namespace) -> Vec<Arc<Runtime>> {
        self.namespaces
            .iter()
            .filter(|((n, _), _)| n == ns)
            .filter_map(|(_, id)| self.runtimes.get(id).cloned())
            .collect()
    }

    pub(super) fn runtimes(&self) -> Vec<Arc<Runtime>> {
        self.runtimes.values().cloned().collect()
    }

    pub(super) fn runtime_count(&self) -> usize {
        self.runtimes.len()
    }

    /// The runtime serving a published function.
    pub(super) fn serving(&self, function_id: &str) -> Option<Arc<Runtime>> {
        self.functions
            .get(function_id)
            .and_then(|id| self.runtimes.get(id))
            .cloned()
    }

    /// Claims `function_id` for one registration; `false` when it is
    /// published or another registration holds it.
    pub(super) fn reserve(&mut self, function_id: &str) -> bool {
        !self.functions.contains_key(function_id) && self.reserved.insert(function_id.to_string())
    }

    pub(super) fn unreserve(&mut self, function_id: &str) {
        self.reserved.remove(function_id);
    }

    /// `function_id` is now served by `rt` (which holds a record).
    pub(super) fn serve(&mut self, function_id: &str, rt: &Runtime) {
        self.functions
            .insert(function_id.to_string(), rt.id.clone());
    }

    /// The VMs of the transient ledger.
    pub(super) fn tracked(&self) -> Vec<String> {
        self.transient.iter().cloned().collect()
    }

    /// In how many places of the ledger `sandbox_id` is (0 or 1, by
    /// construction).
    #[cfg(test)]
    pub(super) fn places(&self, sandbox_id: &str) -> usize {
        self.runtimes
            .values()
            .filter(|rt| rt.sandbox_id == sandbox_id)
            .count()
            + usize::from(self.transient.contains(sandbox_id))
    }
}

/// Serializes the creation of one namespace runtime.
pub(super) type NamespaceGate = Arc<tokio::sync::Mutex<()>>;

/// Identity of this worker's VMs: `sandbox-code-runner:<owner>:<instance>`.
/// `owner` is stable across restarts, `instance` is per process.
#[derive(Debug, Clone)]
pub struct VmNaming {
    pub(crate) owner: String,
    pub(crate) instance: String,
}

impl VmNaming {
    pub fn new(owner: &str) -> VmNaming {
        VmNaming {
            owner: owner.to_string(),
            instance: format!("{:08x}", rand::random::<u32>()),
        }
    }

    fn prefix(&self) -> String {
        format!("sandbox-code-runner:{}:", self.owner)
    }

    pub(crate) fn vm_name(&self) -> String {
        format!("{}{}", self.prefix(), self.instance)
    }

    /// A VM a previous process of the same owner left behind.
    pub(crate) fn is_orphan(&self, name: &str) -> bool {
        name.starts_with(&self.prefix()) && name != self.vm_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(sandbox_id: &str, ns: Option<&str>) -> Arc<Runtime> {
        Runtime::new(
            RuntimeId::generate(),
            sandbox_id.into(),
            Lang::Python,
            ns.map(|n| Namespace::parse(n).unwrap()),
            SdkState::Absent,
            None,
            crate::tenancy::Tenants::new(crate::tenancy::TenantLimits {
                max_concurrent_runs: 1,
                max_depth: 1,
                max_guest_vms: 1,
            })
            .admit(&crate::tenancy::Caller::Trusted)
            .unwrap(),
        )
    }

    #[test]
    fn a_vm_is_in_exactly_one_place_through_every_move() {
        let mut st = State::default();
        let rt = runtime("vm-1", Some("app"));
        st.track("vm-1");
        assert_eq!(st.places("vm-1"), 1, "created, no record yet");
        st.adopt(rt.clone());
        assert_eq!(st.places("vm-1"), 1, "adopted");
        assert!(st
            .namespace_runtime(rt.namespace.as_ref().unwrap(), Lang::Python)
            .is_some());
        st.serve("app::f", &rt);
        assert!(st.serving("app::f").is_some());
        st.release(&rt, &["app::f".to_string()], VmFate::Stopping);
        assert_eq!(
            st.places("vm-1"),
            1,
            "released: tracked until the stop ends"
        );
        assert_eq!(st.tracked(), vec!["vm-1".to_string()]);
        assert!(st.serving("app::f").is_none() && st.runtime(&rt.id).is_none());
        // A second release (shutdown racing a teardown) changes nothing.
        st.release(&rt, &[], VmFate::Stopping);
        assert_eq!(st.places("vm-1"), 1);
        st.gone("vm-1");
        assert_eq!(st.places("vm-1"), 0);
    }

    #[test]
    fn a_reaped_runtime_leaves_the_ledger_at_once() {
        let mut st = State::default();
        let rt = runtime("vm-2", None);
        st.track("vm-2");
        st.adopt(rt.clone());
        st.release(&rt, &[], VmFate::Gone);
        assert_eq!(st.places("vm-2"), 0);
        assert!(st.tracked().is_empty());
    }
}
