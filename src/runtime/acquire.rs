//! A VM for one tenant: a warm one from the pool when one is ready, else a
//! fresh one; under capacity pressure, after this worker's own stops and
//! then the pool's VMs give their room back. The refill the hand-out owes
//! the pool is due once the caller's first exec is done (`RefillOnDrop`).

use std::time::Duration;

use super::lease::VmLease;
use super::{pool, Manager};
use crate::ids::Lang;
use crate::sandbox::SandboxError;

/// A VM handed to one tenant, and the pool's refill, due once the caller's
/// first exec is done (so that exec does not compete with the boot of its
/// replacement): drop `refill` then.
pub(super) struct Acquired {
    pub(super) vm: VmLease,
    /// It came from the warm pool (so it may have been reaped meanwhile).
    pub(super) pooled: bool,
    pub(super) refill: RefillOnDrop,
}

pub(super) struct RefillOnDrop {
    manager: std::sync::Weak<Manager>,
    lang: Lang,
}

impl Drop for RefillOnDrop {
    fn drop(&mut self) {
        if let Some(m) = self.manager.upgrade() {
            pool::refill(&m, self.lang);
        }
    }
}

/// How long a create refused for capacity waits for this worker's own
/// unconfirmed stops (each lasts a stop's grace, ~200 ms) before it drains
/// the pool.
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// A VM for one tenant: a warm one if the pool has it (one that holds the
/// SDK when `wants_sdk`), else a fresh one. Capacity pressure drains the
/// pool before the caller sees `capacity`.
pub(super) async fn acquire(
    m: &Manager,
    lang: Lang,
    wants_sdk: bool,
) -> Result<Acquired, SandboxError> {
    if wants_sdk && lang == Lang::Python {
        m.python_sdk.note_wanted();
    }
    let refill = RefillOnDrop {
        manager: m.me.clone(),
        lang,
    };
    if let Some(vm) = m.vms.take_pooled(lang, wants_sdk) {
        return Ok(Acquired {
            vm,
            pooled: true,
            refill,
        });
    }
    let vm = match m.vms.create(lang).await {
        Err(e) if e.is_capacity() => create_under_pressure(m, lang, e).await?,
        other => other?,
    };
    Ok(Acquired {
        vm,
        pooled: false,
        refill,
    })
}

/// A fresh VM after a create was refused for capacity (`refused`): once
/// this worker's own unconfirmed stops are through (a one-shot answered
/// once its VM was gone; the daemon may count it for the rest of its stop's
/// grace), then once the warm pool has given its VMs back. The refusal when
/// the pool held none.
async fn create_under_pressure(
    m: &Manager,
    lang: Lang,
    refused: SandboxError,
) -> Result<VmLease, SandboxError> {
    let table = m.vms.table();
    let refused = if table.stopping() > 0 {
        table.stops_confirmed(STOP_PATIENCE).await;
        match m.vms.create(lang).await {
            Err(e) if e.is_capacity() => e,
            other => return other,
        }
    } else {
        refused
    };
    if m.vms.drain_pool().await == 0 {
        pool::refill(m, lang);
        return Err(refused);
    }
    m.vms.create(lang).await
}
