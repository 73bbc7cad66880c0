//! The double's central state: the `Daemon` every handler shares (sandbox
//! table, isolation layer, limits), and the id/boot checks every call makes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::error::DaemonError;
use super::isolation::Isolation;
use super::limits::SandboxLimits;
use super::registry::Registry;

/// Everything the handlers share.
pub(crate) struct Daemon {
    pub(crate) registry: Arc<Registry>,
    pub(crate) isolation: Isolation,
    pub(crate) limits: SandboxLimits,
}

impl Daemon {
    /// The sandbox table, isolation layer and limits of one double.
    pub(crate) fn new(isolation: Isolation, limits: SandboxLimits) -> Daemon {
        Daemon {
            registry: Arc::new(Registry::new(limits.max_concurrent_exec_per_sandbox)),
            isolation,
            limits,
        }
    }

    /// The SIGTERM→SIGKILL grace of every stop.
    pub(crate) fn stop_grace(&self) -> Duration {
        Duration::from_millis(self.limits.stop_grace_ms)
    }

    /// How long past its idle timeout a busy sandbox is protected: one
    /// clamped exec deadline plus slack, as on the daemon.
    pub(crate) fn busy_grace(&self) -> Duration {
        Duration::from_millis(self.limits.max_exec_timeout_ms) + Duration::from_secs(60)
    }
}

/// Parses a `sandbox_id`, S001 when it is not a UUID.
pub(crate) fn parse_id(raw: &str) -> Result<Uuid, DaemonError> {
    Uuid::parse_str(raw)
        .map_err(|_| DaemonError::InvalidRequest(format!("sandbox_id is not a valid UUID: {raw}")))
}

/// Waits until the modelled guest boot is over.
pub(crate) async fn wait_for_boot(ready_at: Instant) {
    let now = Instant::now();
    if ready_at > now {
        tokio::time::sleep(ready_at - now).await;
    }
}
