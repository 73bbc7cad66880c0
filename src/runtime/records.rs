//! Runtime records: which runtime serves which namespace and function, for
//! whom; and the name this worker's VMs carry, so the orphan sweep finds a
//! predecessor's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::guest_access::TokenLease;
use crate::ids::{Lang, Namespace, RuntimeId};
use crate::tenancy::{Admission, Lineage, Permit, RunPermit};

use super::lease::VmLease;
use super::meta;
use super::session::Session;
use super::slots::Slots;

/// One VM that outlives a call: a kept run's, or a namespace's. What never
/// changes after creation lives here; what a runtime publishes and holds
/// while it serves is its entry in the [`Records`], under their one lock.
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
    /// What the inventory shows: handle, created, last used, executions.
    pub(super) meta: meta::Meta,
    /// A kept run's session (its runs share one interpreter), if it asked.
    pub(super) session: Option<Session>,
}

impl Runtime {
    /// A runtime holding `vm` from now on, and what it will hold while it
    /// serves (given to [`Records::adopt`]; dropped, it releases all).
    pub(super) fn new(
        id: RuntimeId,
        vm: VmLease,
        namespace: Option<Namespace>,
        slots: usize,
        token: Option<TokenLease>,
        admitted: Admission,
        session: Option<Session>,
    ) -> (Arc<Runtime>, Held) {
        vm.back_a_runtime();
        let rt = Arc::new(Runtime {
            id,
            vm,
            namespace,
            slots: Slots::new(slots),
            owner: admitted.owner,
            lineage: admitted.lineage,
            meta: meta::Meta::new(),
            session,
        });
        let held = Held {
            token,
            permit: admitted.permit,
            root: admitted.root,
        };
        (rt, held)
    }

    /// Its VM's language.
    pub(super) fn lang(&self) -> Lang {
        self.vm.lang()
    }
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

/// What [`Records::forget`] takes off the records: the functions to
/// unpublish (sorted) and what the runtime held, for the caller to release.
pub(super) struct Forgotten {
    pub(super) functions: Vec<String>,
    pub(super) held: Held,
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

/// A serving runtime's entry. A runtime is serving while it has one and
/// forgotten once it has none: the entry leaves the map in one move
/// ([`Records::forget`]), whichever path (teardown, expiry, its lineage's
/// end, shutdown) gets there first, and no move brings it back.
struct Entry {
    rt: Arc<Runtime>,
    /// Published function id → module path inside the VM.
    functions: HashMap<String, String>,
    held: Held,
}

/// The runtime records, behind one lock (the `Manager`'s): which runtime
/// serves which namespace and function, and what each holds. VMs are the VM
/// table's (`vms`); an entry's runtime holds its VM's lease.
#[derive(Default)]
pub(super) struct Records {
    runtimes: HashMap<RuntimeId, Entry>,
    namespaces: HashMap<(Namespace, Lang), RuntimeId>,
    /// Published function id → the runtime serving it.
    functions: HashMap<String, RuntimeId>,
    /// Function ids mid-registration, so two registrations cannot both win.
    reserved: HashSet<String>,
}

impl Records {
    /// Created → serving: `rt` is live, holding `held`, and its
    /// namespace's when it serves one.
    pub(super) fn adopt(&mut self, rt: Arc<Runtime>, held: Held) {
        if let Some(ns) = &rt.namespace {
            self.namespaces
                .insert((ns.clone(), rt.lang()), rt.id.clone());
        }
        let entry = Entry {
            rt: rt.clone(),
            functions: HashMap::new(),
            held,
        };
        self.runtimes.insert(rt.id.clone(), entry);
    }

    /// Serving → forgotten: the entry, its namespace and its functions
    /// leave in one move. `None` when another path forgot it first.
    pub(super) fn forget(&mut self, rt: &Runtime) -> Option<Forgotten> {
        let entry = self.runtimes.remove(&rt.id)?;
        if let Some(ns) = &rt.namespace {
            let key = (ns.clone(), rt.lang());
            if self.namespaces.get(&key) == Some(&rt.id) {
                self.namespaces.remove(&key);
            }
        }
        let mut functions: Vec<String> = entry.functions.into_keys().collect();
        functions.sort();
        for f in &functions {
            self.functions.remove(f);
        }
        Some(Forgotten {
            functions,
            held: entry.held,
        })
    }

    /// Serving → serving one more function: `function_id` (reserved by
    /// [`Records::reserve`]) is now served by `rt` from `module`. `false`
    /// when `rt` was forgotten: nothing is recorded, and the caller
    /// publishes nothing.
    pub(super) fn publish(&mut self, rt: &Runtime, function_id: &str, module: String) -> bool {
        let Some(entry) = self.runtimes.get_mut(&rt.id) else {
            return false;
        };
        entry.functions.insert(function_id.to_string(), module);
        self.functions
            .insert(function_id.to_string(), rt.id.clone());
        true
    }

    pub(super) fn runtime(&self, id: &RuntimeId) -> Option<Arc<Runtime>> {
        self.runtimes.get(id).map(|e| e.rt.clone())
    }

    /// The runtime of one (namespace, language).
    pub(super) fn namespace_runtime(&self, ns: &Namespace, lang: Lang) -> Option<Arc<Runtime>> {
        self.namespaces
            .get(&(ns.clone(), lang))
            .and_then(|id| self.runtime(id))
    }

    /// Every runtime of `ns`, whatever its language.
    pub(super) fn in_namespace(&self, ns: &Namespace) -> Vec<Arc<Runtime>> {
        self.namespaces
            .iter()
            .filter(|((n, _), _)| n == ns)
            .filter_map(|(_, id)| self.runtime(id))
            .collect()
    }

    pub(super) fn runtimes(&self) -> Vec<Arc<Runtime>> {
        self.runtimes.values().map(|e| e.rt.clone()).collect()
    }

    pub(super) fn runtime_count(&self) -> usize {
        self.runtimes.len()
    }

    /// The runtime serving a published function, and where its module
    /// lives in the VM.
    pub(super) fn serving(&self, function_id: &str) -> Option<(Arc<Runtime>, String)> {
        let entry = self.runtimes.get(self.functions.get(function_id)?)?;
        let module = entry.functions.get(function_id)?.clone();
        Some((entry.rt.clone(), module))
    }

    /// `rt`'s published function ids, sorted; none once it is forgotten.
    pub(super) fn functions_of(&self, rt: &Runtime) -> Vec<String> {
        let mut f: Vec<String> = self
            .runtimes
            .get(&rt.id)
            .map(|e| e.functions.keys().cloned().collect())
            .unwrap_or_default();
        f.sort();
        f
    }

    pub(super) fn function_count(&self, rt: &Runtime) -> usize {
        self.runtimes.get(&rt.id).map_or(0, |e| e.functions.len())
    }

    /// `rt`'s guests' token, while it serves.
    pub(super) fn token_of(&self, rt: &Runtime) -> Option<&TokenLease> {
        self.runtimes.get(&rt.id)?.held.token.as_ref()
    }

    /// Claims `function_id` for one registration; `false` when it is
    /// published or another registration holds it.
    pub(super) fn reserve(&mut self, function_id: &str) -> bool {
        !self.functions.contains_key(function_id) && self.reserved.insert(function_id.to_string())
    }

    pub(super) fn unreserve(&mut self, function_id: &str) {
        self.reserved.remove(function_id);
    }
}

/// Serializes the creation of one namespace runtime.
pub(super) type NamespaceGate = Arc<tokio::sync::Mutex<()>>;

/// The records behind their one lock, with the gates that serialize the
/// creation of each namespace runtime and the sequence that names handler
/// modules: what the operations that create, publish and forget runtimes
/// share, and nothing else.
#[derive(Default)]
pub(super) struct Book {
    records: Mutex<Records>,
    gates: Mutex<HashMap<(Namespace, Lang), NamespaceGate>>,
    seq: AtomicU64,
}

impl Book {
    /// The records. Never held across an `.await`: every move on them is
    /// one synchronous step.
    pub(super) fn lock(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The gate of one (namespace, language).
    pub(super) fn gate(&self, ns: &Namespace, lang: Lang) -> NamespaceGate {
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((ns.clone(), lang))
            .or_default()
            .clone()
    }

    /// A number no other handler module of this process carries.
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

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
