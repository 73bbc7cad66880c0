//! How runtimes leave the worker: teardown on request, expiry when the
//! daemon reaped the VM, and the boot-time sweep of a predecessor's orphans.
//! Each unpublishes the runtime's functions and revokes its guests' token.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::errors::TeardownError;
use super::records::{Runtime, VmFate};
use super::{lock, Manager};
use crate::events::EventKind;
use crate::ids::{Namespace, RuntimeId};
use crate::sandbox::SandboxError;
use crate::tenancy::Caller;
use crate::wire::TeardownResponse;

impl Manager {
    /// Forgets a runtime whose VM the daemon dropped, and unpublishes its
    /// functions. Later calls with its id get `runtime_not_found`.
    pub(super) fn expire(&self, rt: &Arc<Runtime>) -> Vec<String> {
        tracing::info!(lang = %rt.lang, namespace = ?rt.namespace.as_ref().map(|n| n.canonical()), "runtime expired");
        let unregistered = self.forget(rt, VmFate::Gone);
        self.lifecycle_end(EventKind::RuntimeExpired, rt, &unregistered);
        unregistered
    }

    /// Releases `rt` from the ledger: its functions are unpublished, its
    /// guests' token revoked, its budget slot returned; its VM is left to
    /// `fate` (see [`VmFate`]).
    pub(super) fn forget(&self, rt: &Arc<Runtime>, fate: VmFate) -> Vec<String> {
        if rt.forgotten.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Vec::new();
        }
        let fns: Vec<String> = {
            let mut f: Vec<String> = lock(&rt.functions).drain().map(|(k, _)| k).collect();
            f.sort();
            f
        };
        // Its guests can no longer connect, and its owner's budget gets
        // the VM back.
        drop(lock(&rt.token).take());
        drop(lock(&rt.permit).take());
        if let Some(ns) = &rt.namespace {
            self.tokens.release(ns.as_str());
        }
        lock(&self.state).release(rt, &fns, fate);
        self.forget_waiting(&rt.sandbox_id);
        for f in &fns {
            self.bus.unpublish(f);
        }
        // A trusted caller's runtime was its lineage's root.
        let root = lock(&rt.root).take();
        if root.is_some() {
            drop(root);
            self.end_lineage(&rt.lineage);
        }
        fns
    }

    /// Releases `rt` for a teardown (its VM is left stopping; the caller
    /// stops it) and tells its subscribers; answers what it unregistered.
    pub(super) fn tear_down(&self, rt: &Arc<Runtime>) -> Vec<String> {
        let unregistered = self.forget(rt, VmFate::Stopping);
        self.lifecycle_end(EventKind::RuntimeTornDown, rt, &unregistered);
        unregistered
    }

    pub(crate) async fn teardown_runtime(
        &self,
        id: &RuntimeId,
    ) -> Result<TeardownResponse, TeardownError> {
        let rt = lock(&self.state)
            .runtime(id)
            .ok_or(TeardownError::UnknownRuntime)?;
        let unregistered = self.tear_down(&rt);
        self.stop_vm(&rt.sandbox_id).await;
        Ok(TeardownResponse {
            runtime_id: Some(id.expose().to_string()),
            namespace: None,
            torn_down: true,
            unregistered,
        })
    }

    /// Stops every runtime of `ns` for `caller`: a guest may tear down
    /// only a namespace its lineage owns. It gets the same refusal whether
    /// the namespace is another tenant's or nobody's, so it cannot probe
    /// which namespaces exist.
    pub(crate) async fn teardown_namespace_as(
        &self,
        caller: &Caller,
        ns: &Namespace,
    ) -> Result<TeardownResponse, TeardownError> {
        let rts: Vec<Arc<Runtime>> = lock(&self.state).in_namespace(ns);
        if matches!(caller, Caller::Guest(_))
            && (rts.is_empty() || rts.iter().any(|rt| !caller.may_change(rt.owner.as_ref())))
        {
            return Err(TeardownError::NotOwned {
                namespace: ns.as_str().to_string(),
            });
        }
        if rts.is_empty() {
            return Err(TeardownError::NoRuntime {
                namespace: ns.canonical(),
            });
        }
        let mut unregistered = BTreeSet::new();
        for rt in rts {
            unregistered.extend(self.tear_down(&rt));
            self.stop_vm(&rt.sandbox_id).await;
        }
        Ok(TeardownResponse {
            runtime_id: None,
            namespace: Some(ns.canonical()),
            torn_down: true,
            unregistered: unregistered.into_iter().collect(),
        })
    }

    /// Stops what a crashed predecessor of this owner left running.
    pub async fn sweep_orphans(&self) -> Result<usize, SandboxError> {
        let listed = self.list_vms().await?;
        let mut stopped = 0;
        for s in listed {
            if s.name.as_deref().is_some_and(|n| self.naming.is_orphan(n)) {
                self.stop_vm(&s.sandbox_id).await;
                stopped += 1;
            }
        }
        self.lifecycle_swept(stopped);
        Ok(stopped)
    }
}
