//! How runtimes leave the worker: teardown on request, and expiry when the
//! daemon reaped the VM. Each unpublishes the runtime's functions and
//! revokes its guests' token.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::errors::TeardownError;
use super::lifecycle;
use super::records::{Forgotten, Runtime};
use super::Manager;
use crate::events::EventKind;
use crate::ids::{Namespace, RuntimeId};
use crate::tenancy::Caller;
use crate::tenancy::Lineage;
use crate::wire::TeardownResponse;

/// Forgets a runtime whose VM the daemon dropped, and unpublishes its
/// functions. Later calls with its id get `runtime_not_found`.
pub(super) fn expire(m: &Manager, rt: &Arc<Runtime>) -> Vec<String> {
    tracing::info!(lang = %rt.lang(), namespace = ?rt.namespace.as_ref().map(|n| n.canonical()), "runtime expired");
    rt.vm.gone();
    let unregistered = forget(m, rt);
    lifecycle::ended(m, EventKind::RuntimeExpired, rt, &unregistered);
    unregistered
}

/// Drops `rt`'s record: its functions are unpublished, its guests' token
/// revoked, its budget slot returned. Its VM is its lease's business.
pub(super) fn forget(m: &Manager, rt: &Arc<Runtime>) -> Vec<String> {
    // One move under the records lock: forgotten, its functions taken off
    // the records and the bus. A publish adds a function under the same
    // lock, only to a runtime still serving (`Records::publish`).
    let Forgotten {
        functions: fns,
        held,
    } = {
        let mut records = m.book.lock();
        let Some(gone) = records.forget(rt) else {
            return Vec::new();
        };
        for id in &gone.functions {
            m.bus.unpublish(id);
        }
        gone
    };
    // Its guests can no longer connect, and its owner's budget gets the
    // VM back.
    drop(held.token);
    drop(held.permit);
    if let Some(ns) = &rt.namespace {
        m.tokens.release(ns.as_str());
    }
    // A trusted caller's runtime was its lineage's root.
    if let Some(root) = held.root {
        drop(root);
        lineage_end(m, &rt.lineage);
    }
    fns
}

/// Forgets `rt` for a teardown and tells its subscribers; answers what it
/// unregistered. The caller stops its VM.
pub(super) fn tear_down(m: &Manager, rt: &Arc<Runtime>) -> Vec<String> {
    let unregistered = forget(m, rt);
    lifecycle::ended(m, EventKind::RuntimeTornDown, rt, &unregistered);
    unregistered
}

pub(super) async fn runtime(
    m: &Manager,
    id: &RuntimeId,
) -> Result<TeardownResponse, TeardownError> {
    let rt = m
        .book
        .lock()
        .runtime(id)
        .ok_or(TeardownError::UnknownRuntime)?;
    let unregistered = tear_down(m, &rt);
    rt.vm.stop().await;
    Ok(TeardownResponse {
        runtime_id: Some(id.expose().to_string()),
        namespace: None,
        torn_down: true,
        unregistered,
    })
}

/// Stops every runtime of `ns` for `caller`: a guest may tear down only a
/// namespace its lineage owns. It gets the same refusal whether the
/// namespace is another tenant's or nobody's, so it cannot probe which
/// namespaces exist.
pub(super) async fn namespace(
    m: &Manager,
    caller: &Caller,
    ns: &Namespace,
) -> Result<TeardownResponse, TeardownError> {
    let rts: Vec<Arc<Runtime>> = m.book.lock().in_namespace(ns);
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
        unregistered.extend(tear_down(m, &rt));
        rt.vm.stop().await;
    }
    Ok(TeardownResponse {
        runtime_id: None,
        namespace: Some(ns.canonical()),
        torn_down: true,
        unregistered: unregistered.into_iter().collect(),
    })
}

/// A lineage ends with its root: once the trusted run or runtime it grew
/// from is gone, nobody who started it can reach what its guest code left
/// behind. Tears down every runtime guest code of `lineage` created. Their VMs
/// stop in the background; their functions and tokens are gone at once.
pub(super) fn lineage_end(m: &Manager, lineage: &Lineage) {
    let left: Vec<Arc<Runtime>> = m
        .book
        .lock()
        .runtimes()
        .into_iter()
        .filter(|rt| rt.owner.as_ref() == Some(lineage))
        .collect();
    if left.is_empty() {
        return;
    }
    tracing::info!(
        runtimes = left.len(),
        "a lineage ended; tearing down what its guest code left"
    );
    for rt in left {
        tear_down(m, &rt);
        drop(rt.vm.stop_in_background());
    }
}
