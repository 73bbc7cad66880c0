//! Runtime records and the manager's shared state: which VMs this worker
//! holds, for whom, and under which name, so shutdown and the orphan sweep
//! are complete.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::guest_access::TokenLease;
use crate::ids::{Lang, Namespace, RuntimeId};
use crate::tenancy::{Lineage, RunPermit};

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
        owner: Option<Lineage>,
        permit: Option<RunPermit>,
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
            owner,
            permit: Mutex::new(permit),
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

/// Everything the manager holds, behind one lock.
#[derive(Default)]
pub(super) struct State {
    pub(super) runtimes: HashMap<RuntimeId, Arc<Runtime>>,
    pub(super) namespaces: HashMap<(Namespace, Lang), RuntimeId>,
    /// Published function id → the runtime serving it.
    pub(super) functions: HashMap<String, RuntimeId>,
    /// Function ids mid-registration, so two registrations cannot both win.
    pub(super) reserved: HashSet<String>,
    /// The transient ledger: VMs of calls in flight that no record holds yet
    /// (one-shot and keep runs, pooled VMs being stopped).
    pub(super) transient: HashSet<String>,
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
