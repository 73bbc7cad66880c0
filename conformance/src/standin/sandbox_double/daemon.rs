//! The double's central state: the `Daemon` every handler shares (sandbox
//! table, isolation layer, limits, its link to the engine), and the id/boot
//! checks every call makes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iii_sdk::IIIClient;
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
    /// The double's own engine connection, for the data channels of
    /// `fs::write` and `fs::read`; set once registered, cleared at shutdown
    /// (the handlers it holds hold this `Daemon`).
    engine: Mutex<Option<IIIClient>>,
}

impl Daemon {
    /// The sandbox table, isolation layer and limits of one double.
    pub(crate) fn new(isolation: Isolation, limits: SandboxLimits) -> Daemon {
        Daemon {
            registry: Arc::new(Registry::new(limits.max_concurrent_exec_per_sandbox)),
            isolation,
            limits,
            engine: Mutex::new(None),
        }
    }

    /// Links the double's engine connection (see [`Daemon::engine`]).
    pub(crate) fn attach(&self, client: &IIIClient) {
        *self.engine.lock().unwrap_or_else(|p| p.into_inner()) = Some(client.clone());
    }

    /// Drops the engine connection: no channel can be opened afterwards.
    pub(crate) fn detach(&self) {
        self.engine.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// The double's engine connection, once attached.
    pub(crate) fn engine(&self) -> Option<IIIClient> {
        self.engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
