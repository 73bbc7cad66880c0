//! Runtime records: which runtime serves which namespace and function, for
//! whom; and the name this worker's VMs carry, so the orphan sweep finds a
//! predecessor's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::guest_access::TokenLease;
use crate::ids::{Lang, Namespace, RuntimeId};
use crate::tenancy::{Admission, Lineage, Permit, RunPermit};

use super::lease::VmLease;
use super::meta;
use super::session::Session;
use super::slots::Slots;

/// One VM that outlives a call: a kept run's, or a namespace's.
pub(super) struct Runtime {
    pub(super) id: RuntimeId,
    /// Its VM: the record is the lease's one holder.
    pub(super) vm: VmLease,
    pub(super) namespace: Option<Namespace>,
    /// Calls that run at once, and the queue of the rest.
    pub(super) slots: Arc<Slots>,
    /// The lineage that owns it (guest code created it), or none (a
    /// trusted caller did).
    pub(super) owner: Option<Lineage>,
    /// The lineage its guests belong to.
    pub(super) lineage: Lineage,
    /// Its functions and what it holds while it serves, behind one lock;
    /// every move checks the state it leaves (`Life`).
    state: Mutex<State>,
    /// What the inventory shows: handle, created, last used, executions.
    pub(super) meta: meta::Meta,
    /// A kept run's session (its runs share one interpreter), if it asked.
    pub(super) session: Option<Session>,
}

impl Runtime {
    /// A record holding `vm` from now on.
    pub(super) fn new(
        id: RuntimeId,
        vm: VmLease,
        namespace: Option<Namespace>,
        slots: usize,
        token: Option<TokenLease>,
        admitted: Admission,
        session: Option<Session>,
    ) -> Arc<Runtime> {
        vm.back_a_runtime();
        Arc::new(Runtime {
            id,
            vm,
            namespace,
            slots: Slots::new(slots),
            owner: admitted.owner,
            lineage: admitted.lineage,
            state: Mutex::new(State {
                functions: HashMap::new(),
                life: Life::Serving(Held {
                    token,
                    permit: admitted.permit,
                    root: admitted.root,
                }),
            }),
            meta: meta::Meta::new(),
            session,
        })
    }

    /// Its VM's language.
    pub(super) fn lang(&self) -> Lang {
        self.vm.lang()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its published function ids, sorted.
    pub(super) fn functions(&self) -> Vec<String> {
        let mut f: Vec<String> = self.state().functions.keys().cloned().collect();
        f.sort();
        f
    }

    pub(super) fn function_count(&self) -> usize {
        self.state().functions.len()
    }

    /// Where a published function's module lives in the VM.
    pub(super) fn module_of(&self, function_id: &str) -> Option<String> {
        self.state().functions.get(function_id).cloned()
    }

    /// Its guests' token, while it serves.
    pub(super) fn with_token<T>(&self, f: impl FnOnce(Option<&TokenLease>) -> T) -> T {
        match &self.state().life {
            Life::Serving(held) => f(held.token.as_ref()),
            Life::Forgotten => f(None),
        }
    }

    /// Serving → serving one more function. `false` when it was forgotten
    /// (the caller then publishes nothing). Called under the records lock.
    pub(super) fn add_function(&self, function_id: &str, module: String) -> bool {
        let mut st = self.state();
        if matches!(st.life, Life::Forgotten) {
            return false;
        }
        st.functions.insert(function_id.to_string(), module);
        true
    }

    /// Serving → forgotten, once: its functions (sorted) and what it held,
    /// for the caller to release. `None` when another path forgot it first.
    /// Called under the records lock.
    pub(super) fn forget(&self) -> Option<(Vec<String>, Held)> {
        let mut st = self.state();
        let Life::Serving(held) = std::mem::replace(&mut st.life, Life::Forgotten) else {
            return None;
        };
        let mut functions: Vec<String> = st.functions.drain().map(|(k, _)| k).collect();
        functions.sort();
        Some((functions, held))
    }
}

/// A runtime's functions and its life.
struct State {
    /// Published function id → module path inside the VM.
    functions: HashMap<String, String>,
    life: Life,
}

/// Where a runtime is in its life. It leaves the records once, however many
/// paths (teardown, expiry, its lineage's end, shutdown) race to forget it.
enum Life {
    Serving(Held),
    /// Its functions, token and budget slot are gone.
    Forgotten,
}

/// What a serving runtime holds, given back when it is forgotten.
pub(super) struct Held {
    /// Its guests' token on the guest listener.
    pub(super) token: Option<TokenLease>,
    /// The slot of its owner's budget.
    pub(super) permit: Option<RunPermit>,
    /// For a trusted caller's runtime: its lineage's life (see
    /// `Admission::root`).
    pub(super) root: Option<Permit>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.id)
            .field("lang", &self.lang())
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The runtime records, behind one lock: which runtime serves which
/// namespace and function. VMs are the VM table's (`vms`); a record holds
/// its VM's lease.
#[derive(Default)]
pub(super) struct Records {
    runtimes: HashMap<RuntimeId, Arc<Runtime>>,
    namespaces: HashMap<(Namespace, Lang), RuntimeId>,
    /// Published function id → the runtime serving it.
    functions: HashMap<String, RuntimeId>,
    /// Function ids mid-registration, so two registrations cannot both win.
    reserved: HashSet<String>,
}

impl Records {
    /// `rt` is live, and its namespace's when it serves one.
    pub(super) fn adopt(&mut self, rt: Arc<Runtime>) {
        if let Some(ns) = &rt.namespace {
            self.namespaces
                .insert((ns.clone(), rt.lang()), rt.id.clone());
        }
        self.runtimes.insert(rt.id.clone(), rt);
    }

    /// Drops `rt`'s record and its functions (`fns`).
    pub(super) fn release(&mut self, rt: &Runtime, fns: &[String]) {
        if self.runtimes.remove(&rt.id).is_none() {
            return;
        }
        if let Some(ns) = &rt.namespace {
            let key = (ns.clone(), rt.lang());
            if self.namespaces.get(&key) == Some(&rt.id) {
                self.namespaces.remove(&key);
            }
        }
        for f in fns {
            self.functions.remove(f);
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
