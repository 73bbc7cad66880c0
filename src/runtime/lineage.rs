//! A lineage ends with its root: once the trusted run or runtime it grew
//! from is gone, nobody who started it can reach what its guest code left
//! behind, so those runtimes are torn down instead of holding VMs for the
//! idle TTL.

use std::sync::Arc;

use super::records::Runtime;
use super::{lock, Manager};
use crate::tenancy::Lineage;

impl Manager {
    /// Tears down every runtime guest code of `lineage` created. Their VMs
    /// stop in the background; their functions and tokens are gone at once.
    pub(super) fn end_lineage(&self, lineage: &Lineage) {
        let left: Vec<Arc<Runtime>> = lock(&self.state)
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
            self.tear_down(&rt);
            self.stop_in_background(rt.sandbox_id.clone());
        }
    }

    /// Whether a runtime guest code of `lineage` just created may be kept:
    /// its root may have ended while it booted (a void call outlives the
    /// code that made it).
    pub(super) fn lineage_lives(&self, lineage: &Lineage) -> bool {
        self.tenants.root_alive(lineage)
    }
}
