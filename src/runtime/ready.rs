//! Pre-started interpreters, the core's side: the one exec a call or run in
//! a VM becomes. With an interpreter waiting there, the call is relayed
//! into it: python's fork server forks the call a fresh child and keeps
//! waiting; a node interpreter serves the call and, in a VM that serves
//! later calls, the next one starts as it ends. Without one, the call runs
//! cold as it always did, starting one for the next call. Either way the
//! call gets a fresh process. Which interpreter waits where is the VM
//! table's.

use super::lease::VmLease;
use super::Manager;
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::prestart::{self, Verdict};
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

/// Whether the VM serves calls after this one (a kept or namespace
/// runtime), so an interpreter should wait in it for the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    ServesAgain,
    Done,
}

/// One call or run `p` (a wrapper exec of the VM's language) in `vm`.
pub(super) async fn exec_call(
    m: &Manager,
    vm: &VmLease,
    p: ExecParams,
    then: Then,
) -> Result<ExecOutput, SandboxError> {
    if !m.config.prestart {
        return vm.exec(p).await;
    }
    let lang = vm.lang();
    let again = then == Then::ServesAgain;
    let Some(waiting) = vm.take_waiting() else {
        // Another call may have the interpreter (a runtime serves several
        // at once): only with none out may this one start the next.
        let start_next = again && vm.may_start_interpreter();
        return cold(vm, p, start_next).await;
    };
    // Python's fork server serves every call of the VM; a node interpreter
    // serves one, and the next one starts as it ends.
    let replaced = lang == Lang::Node || waiting.stale;
    let next = (again && replaced).then(|| vm.next_generation());
    let timeout_ms = p.timeout_ms;
    let relayed = vm
        .exec(prestart::relay_exec(lang, waiting.generation, next, &p))
        .await;
    let keeps = match next {
        Some(n) => Some(n),
        None if again && !replaced => Some(waiting.generation),
        None => None,
    };
    waiting_after(vm, keeps, &relayed);
    vm.interpreter_returned();
    match prestart::verdict(relayed?, timeout_ms) {
        Verdict::Ran(out) => Ok(out),
        Verdict::TimedOut(e) => Err(e),
        Verdict::Cold => {
            tracing::debug!("the pre-started interpreter was gone; the call runs cold");
            // A node relay started the next one already; a python server
            // that is gone must be started again.
            let restart = again && next.is_none();
            if restart {
                vm.forget_waiting();
            }
            cold(vm, p, restart && vm.may_start_interpreter()).await
        }
    }
}

/// `p` as it always ran, starting an interpreter for the next call when
/// the VM serves again.
async fn cold(vm: &VmLease, p: ExecParams, again: bool) -> Result<ExecOutput, SandboxError> {
    let next = again.then(|| vm.next_generation());
    let cold = match next {
        Some(n) => prestart::cold_then_spawn(vm.lang(), n, p),
        None => p,
    };
    let out = vm.exec(cold).await;
    waiting_after(vm, next, &out);
    out
}

/// Starts an interpreter waiting in a VM no call is using (a pooled one,
/// once it is prepared). A failure only means the first call runs cold.
pub(super) async fn start_waiting(m: &Manager, vm: &VmLease) {
    if !m.config.prestart {
        return;
    }
    let n = vm.next_generation();
    match vm.exec(prestart::spawn_exec(vm.lang(), n)).await {
        Ok(_) => vm.put_waiting(n),
        Err(e) => {
            tracing::debug!(error = %redact_uuids(&e.to_string()), "starting a waiting interpreter failed")
        }
    }
}

/// The exec after which generation `next` waits went through (so the
/// interpreter is there or starting, or the VM is gone and it does not
/// matter).
fn waiting_after<T>(vm: &VmLease, next: Option<u64>, out: &Result<T, SandboxError>) {
    match (next, out) {
        (Some(n), Ok(_)) => vm.put_waiting(n),
        (Some(n), Err(e)) if !e.is_gone() => vm.put_waiting(n),
        _ => {}
    }
}
