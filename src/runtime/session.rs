//! Runs in a session, the runtime's side: whether its interpreter is
//! believed alive, and one run as a turn of it (`crate::session` speaks the
//! guest's protocol). The interpreter serves only its runtime's runs, which
//! the runtime's one slot serializes, so its state is the runtime's record
//! and not the VM table's.

use std::sync::atomic::{AtomicBool, Ordering};

use super::errors::{DaemonFailure, RunError};
use super::lease::VmLease;
use crate::error::redact_uuids;
use crate::prestart::VerdictKey;
use crate::sandbox::{ExecOutput, ExecParams};
use crate::session::{turn_exec, verdict, Interpreter, Turn};
use crate::wire::SessionState;

/// A kept runtime's session.
#[derive(Debug, Default)]
pub(super) struct Session {
    /// Its interpreter lived after the last run (so the next run need not
    /// carry the harness: if it is gone after all, the run says so and is
    /// sent again with it).
    alive: AtomicBool,
    /// An interpreter ever started: one started later is a reset.
    started: AtomicBool,
}

/// Runs `p` (a run wrapper's exec) as the next turn of `session` in `vm`.
pub(super) async fn turn(
    vm: &VmLease,
    session: &Session,
    p: &ExecParams,
) -> Result<(ExecOutput, SessionState), RunError> {
    let daemon = |e| DaemonFailure::new(e, p.timeout_ms);
    let mut start = !session.alive.load(Ordering::Acquire);
    loop {
        let key = VerdictKey::fresh();
        let out = vm
            .exec(turn_exec(vm.lang(), p, start, &key))
            .await
            .map_err(|e| RunError::Exec(daemon(e)))?;
        match verdict(out, p.timeout_ms, &key) {
            Turn::Ran(found, out) => {
                let state = match found {
                    Interpreter::Found => SessionState::Continued,
                    Interpreter::Started if session.started.swap(true, Ordering::AcqRel) => {
                        SessionState::Reset
                    }
                    Interpreter::Started => SessionState::New,
                };
                session.alive.store(true, Ordering::Release);
                return Ok((out, state));
            }
            // Gone since the last run, and nothing handed: once more,
            // with the harness.
            Turn::Gone if !start => start = true,
            Turn::Gone => {
                session.alive.store(false, Ordering::Release);
                return Err(RunError::SessionLost {
                    boot: String::new(),
                });
            }
            Turn::Lost(_, boot) => {
                session.alive.store(false, Ordering::Release);
                return Err(RunError::SessionLost {
                    boot: redact_uuids(boot.trim()),
                });
            }
            Turn::TimedOut(e) => {
                session.alive.store(false, Ordering::Release);
                session.started.store(true, Ordering::Release);
                return Err(RunError::SessionTimedOut(daemon(e)));
            }
        }
    }
}
