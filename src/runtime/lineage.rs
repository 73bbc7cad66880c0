//! A lineage ends with its root: once the trusted run or runtime it grew
//! from is gone, nobody who started it can reach what its guest code left
//! behind, so those runtimes are torn down instead of holding VMs for the
//! idle TTL.

use std::sync::Arc;

use super::records::Runtime;
use super::{lock, teardown, Manager};
use crate::tenancy::Lineage;

/// Tears down every runtime guest code of `lineage` created. Their VMs
/// stop in the background; their functions and tokens are gone at once.
pub(super) fn end(m: &Manager, lineage: &Lineage) {
    let left: Vec<Arc<Runtime>> = lock(&m.records)
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
        teardown::tear_down(m, &rt);
        drop(rt.vm.stop_in_background());
    }
}

/// Whether a runtime guest code of `lineage` just created may be kept: its
/// root may have ended while it booted (a void call outlives the code that
/// made it).
pub(super) fn lives(m: &Manager, lineage: &Lineage) -> bool {
    m.tenants.root_alive(lineage)
}
