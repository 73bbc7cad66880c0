//! Pre-started interpreters, the core's side: the one exec a call or run in
//! a VM becomes. With an interpreter waiting there, the call is relayed
//! into it: python's fork server forks the call a fresh child and keeps
//! waiting; a node interpreter serves the call and, in a VM that serves
//! later calls, the next one starts as it ends. Without one, the call runs
//! cold as it always did, starting one for the next call. Either way the
//! call gets a fresh process. Which interpreters wait where is the VM
//! table's; a runtime that runs several calls at once keeps up to one
//! python server per call slot, started beside the busy ones.

use super::lease::VmLease;
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::prestart::{self, Prestart, Server, Start, Verdict};
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

/// Whether the VM serves calls after this one (a kept or namespace
/// runtime), so an interpreter should wait in it for the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    ServesAgain,
    Done,
}

/// One call or run `p` (a wrapper exec of the VM's language) in `vm`, a VM
/// that runs at most `slots` of them at once.
pub(super) async fn exec_call(
    prestart: Prestart,
    vm: &VmLease,
    p: ExecParams,
    then: Then,
    slots: usize,
) -> Result<ExecOutput, SandboxError> {
    let Some(server) = Server::of(vm.lang(), prestart) else {
        return vm.exec(p).await;
    };
    let lang = vm.lang();
    let again = then == Then::ServesAgain;
    // Python's servers are the table's to count: a call takes one. Node's
    // are the guest's (`scr_fill` and `scr_scope_fill` keep one more than
    // the slots): calls at once each relay to one of them, naming the
    // latest fill's generation.
    let taken = match lang {
        Lang::Python => vm.take_waiting(),
        Lang::Node => vm.peek_waiting(),
    };
    let Some(waiting) = taken else {
        return cold(server, vm, p, again, slots).await;
    };
    // Python's fork server and node's scope servers serve every call of
    // the VM; a node interpreter serves one, and the next one starts as it
    // ends. A python server that predates the SDK is replaced: alone when
    // it is the VM's only one, else beside the others (and retired at the
    // verdict). (A scope loads the SDK when it starts: none is stale.)
    let replaced = server.spent_by_a_call() || (lang == Lang::Python && waiting.stale);
    let next = (again && replaced).then(|| {
        let start = match lang {
            // Node's spawner never ends a busy interpreter.
            Lang::Node => Start::Alone,
            Lang::Python => vm.replace_plan(),
        };
        (vm.next_generation(), start)
    });
    let timeout_ms = p.timeout_ms;
    let key = prestart::VerdictKey::fresh();
    let relayed = vm
        .exec(prestart::relay_exec(
            server,
            waiting.generation,
            next,
            slots,
            &p,
            &key,
        ))
        .await;
    let keeps = match next {
        Some((n, _)) => Some(n),
        None if again && !replaced => Some(waiting.generation),
        None => None,
    };
    settle_start(vm, next.map(|(_, s)| s), waits_after(keeps, &relayed));
    if lang == Lang::Python {
        vm.interpreter_returned();
    }
    match prestart::verdict(relayed?, timeout_ms, &key) {
        Verdict::Ran(out) => Ok(out),
        Verdict::TimedOut(e) => Err(e),
        Verdict::Cold => {
            tracing::debug!("the pre-started interpreter was gone; the call runs cold");
            // A node relay started the next one already; a python server
            // that is gone must be started again.
            let restart = again && next.is_none();
            if restart {
                vm.forget_waiting(waiting.generation);
            }
            cold(server, vm, p, restart, slots).await
        }
    }
}

/// `p` as it always ran, starting an interpreter for the next call when
/// the VM serves again and may hold one more (see `VmTable::start_plan`).
async fn cold(
    server: Server,
    vm: &VmLease,
    p: ExecParams,
    again: bool,
    slots: usize,
) -> Result<ExecOutput, SandboxError> {
    let start = if again {
        vm.start_plan(slots, vm.lang() == Lang::Python)
    } else {
        None
    };
    let next = start.map(|s| (vm.next_generation(), s));
    let cold = match next {
        Some((n, s)) => prestart::cold_then_spawn(server, n, s, slots, p),
        None => p,
    };
    let out = vm.exec(cold).await;
    settle_start(
        vm,
        next.map(|(_, s)| s),
        waits_after(next.map(|(n, _)| n), &out),
    );
    out
}

/// Starts an interpreter waiting in a VM no call is using (a pooled one,
/// once it is prepared). A failure only means the first call runs cold.
pub(super) async fn start_waiting(prestart: Prestart, vm: &VmLease) {
    let Some(server) = Server::of(vm.lang(), prestart) else {
        return;
    };
    let n = vm.next_generation();
    match vm.exec(prestart::spawn_exec(server, n)).await {
        Ok(_) => vm.put_waiting(n),
        Err(e) => {
            tracing::debug!(error = %redact_uuids(&e.to_string()), "starting a waiting interpreter failed")
        }
    }
}

/// Records what waits after an exec that started an interpreter the way
/// `start` says (`None`: it started none, or kept the one it used): a
/// `Beside` start settles its count, any other waits as usual.
fn settle_start(vm: &VmLease, start: Option<Start>, kept: Option<u64>) {
    match (start, kept) {
        (Some(Start::Beside), kept) => vm.started(kept),
        (_, Some(g)) => vm.put_waiting(g),
        (_, None) => {}
    }
}

/// The generation that waits after an exec that was to leave `next`
/// waiting: there or starting, unless the VM is gone (then it does not
/// matter).
fn waits_after<T>(next: Option<u64>, out: &Result<T, SandboxError>) -> Option<u64> {
    match (next, out) {
        (Some(n), Ok(_)) => Some(n),
        (Some(n), Err(e)) if !e.is_gone() => Some(n),
        _ => None,
    }
}
