//! Whether a lineage's root still lives: a runtime guest code creates is
//! kept only while someone who started the lineage can reach it (its end
//! is `teardown::lineage_end`).

use super::Manager;
use crate::tenancy::Lineage;

/// Whether a runtime guest code of `lineage` just created may be kept: its
/// root may have ended while it booted (a void call outlives the code that
/// made it).
pub(super) fn lives(m: &Manager, lineage: &Lineage) -> bool {
    m.tenants.root_alive(lineage)
}
