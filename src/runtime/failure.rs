//! Daemon outcomes as the caller sees them: a [`SandboxError`]'s typed
//! [`Outcome`] mapped to a [`WorkerError`], with the S-code kept and sandbox
//! ids removed.

use crate::error::{redact_uuids, WorkerError};
use crate::sandbox::{Outcome, SandboxError, INSTALL_HINT};

/// What a kept run's caller hears once its VM was reaped.
pub(super) const EXPIRED_RUN: &str =
    "the runtime's VM was reaped after its idle TTL; start a new one with keep: true";
/// What a namespace's caller hears once its VM was reaped.
pub(super) const EXPIRED_FUNCTION: &str =
    "the namespace runtime's VM was reaped after its idle TTL; its functions are unregistered; register again to boot a fresh one";

/// An infrastructure failure of an operation whose budget was `budget_ms`.
pub(super) fn infra_error(e: SandboxError, budget_ms: u64) -> WorkerError {
    match e.outcome() {
        Outcome::NotInstalled => WorkerError::Engine(INSTALL_HINT.to_string()),
        Outcome::Timeout => WorkerError::Timeout(format!("exceeded its {budget_ms} ms budget")),
        Outcome::Capacity { code, message } => {
            WorkerError::Capacity(format!("iii-sandbox {code}: {}", redact_uuids(message)))
        }
        Outcome::Gone { code, message }
        | Outcome::ExecCap { code, message }
        | Outcome::VmDown { code, message }
        | Outcome::Refused { code, message } => {
            WorkerError::Engine(format!("iii-sandbox {code}: {}", redact_uuids(message)))
        }
        Outcome::Bus(b) => WorkerError::Engine(format!(
            "bus error {}: {}",
            b.code,
            redact_uuids(&b.message)
        )),
        Outcome::Unsealed { message } => WorkerError::Engine(redact_uuids(message)),
    }
}

/// The last `max` bytes of `s`, on a char boundary.
pub(super) fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}
