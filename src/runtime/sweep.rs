//! The boot-time sweep: stopping what a crashed predecessor of this owner
//! left running (same owner, another instance: `VmNaming::is_orphan`).
//! Charged to `sweep`, like any operation.

use super::lifecycle;
use super::vms::SandboxId;
use super::Manager;
use crate::metering::metered;
use crate::sandbox::SandboxError;

pub(super) async fn orphans(m: &Manager) -> Result<usize, SandboxError> {
    metered(&m.stats.sweep, async {
        let listed = m.vms.list().await?;
        let mut stopped = 0;
        for s in listed {
            if s.name.as_deref().is_some_and(|n| m.naming.is_orphan(n)) {
                m.vms.stop(&SandboxId::new(s.sandbox_id)).await;
                stopped += 1;
            }
        }
        lifecycle::swept(m, stopped);
        Ok(stopped)
    })
    .await
}
