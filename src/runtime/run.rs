//! The `run` operation: one-shot and kept runs on a fresh (or warm) VM, and
//! runs in a kept runtime, one exec at a time.

use std::sync::Arc;
use std::time::Duration;

use super::errors::{DaemonFailure, RunError};
use super::lease::VmLease;
use super::lifecycle;
use super::lifeline::{self, Lifeline};
use super::ready::{self, Then};
use super::records::Runtime;
use super::session::{self, Session};
use super::{acquire, teardown, Manager};
use crate::config::OneshotStop;
use crate::events::EventKind;
use crate::guest;
use crate::guest_access::TokenLease;
use crate::ids::{Lang, RuntimeId};
use crate::run_result;
use crate::sandbox::{ExecOutput, ExecParams};
use crate::stream::{Sink, StreamTo};
use crate::tenancy::Caller;
use crate::wire::{RunResponse, SessionState};

/// The one caller of a kept runtime's slot: whoever holds its id.
const KEPT_RUNS: &str = "kept runs";

/// What a run without a runtime leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: a one-shot.
    Nothing,
    /// Its VM, whose files later runs see, each in a fresh process.
    Files,
    /// Its VM and its interpreter: later runs see its globals too.
    Session,
}

/// One run's exec, with a fresh secret for its result frame.
fn run_exec(m: &Manager, lang: Lang, code: &str, timeout_ms: u64) -> (ExecParams, String) {
    let secret = guest::new_secret();
    let p = guest::run_exec_with_result(lang, code, timeout_ms, &secret, m.config.max_result_bytes);
    (p, secret)
}

fn response(
    m: &Manager,
    out: ExecOutput,
    secret: &str,
    runtime_id: Option<String>,
    session: Option<SessionState>,
) -> RunResponse {
    let cap = m.config.max_stream_bytes;
    let (stdout, completion) = run_result::take(&out.stdout, secret);
    let success = out.exit_code == Some(0);
    let result = match completion {
        Some(c) if success => run_result::capped(c, m.config.max_result_bytes),
        _ => serde_json::Value::Null,
    };
    RunResponse {
        stdout: guest::cap_stream(&stdout, cap, "stdout"),
        stderr: guest::cap_stream(&out.stderr, cap, "stderr"),
        exit_code: out.exit_code.map(i64::from).unwrap_or(-1),
        success,
        duration_ms: out.duration_ms,
        result,
        runtime_id,
        session,
        output: None,
    }
}

/// `p` in `vm`: a turn of `session` when the runtime has one, else as
/// every call (`ready::exec_call`).
async fn exec_run(
    m: &Manager,
    vm: &VmLease,
    session: Option<&Session>,
    p: ExecParams,
    then: Then,
) -> Result<(ExecOutput, Option<SessionState>), RunError> {
    match session {
        Some(s) => session::turn(vm, s, &p)
            .await
            .map(|(out, state)| (out, Some(state))),
        None => {
            let budget = p.timeout_ms;
            ready::exec_call(m.config.prestart_mode().for_runs(), vm, p, then, 1)
                .await
                .map(|out| (out, None))
                .map_err(|e| RunError::Exec(DaemonFailure::new(e, budget)))
        }
    }
}

/// `exec_run`, its output streamed to `sink` as it comes when the caller
/// gave one (`VmLease::exec` follows whatever exec `p` becomes).
async fn exec_streamed(
    m: &Manager,
    vm: &VmLease,
    session: Option<&Session>,
    mut p: ExecParams,
    then: Then,
    sink: Option<&Arc<Sink>>,
) -> Result<(ExecOutput, Option<SessionState>), RunError> {
    if let Some(sink) = sink {
        p.stream = Some(StreamTo::new(sink.clone()));
        p.env
            .insert(crate::stream::STREAMED_ENV.to_string(), "1".to_string());
    }
    exec_run(m, vm, session, p, then).await
}

/// `p` with the guest's token in its env, when it has one.
pub(super) fn with_token(mut p: ExecParams, token: Option<&TokenLease>) -> ExecParams {
    if let Some(t) = token {
        p.env.insert(
            crate::guest_access::TOKEN_ENV.to_string(),
            t.expose().to_string(),
        );
    }
    p
}

/// `p` with `rt`'s guest token in its env, while it serves.
pub(super) fn for_runtime(m: &Manager, rt: &Runtime, p: ExecParams) -> ExecParams {
    with_token(p, m.book.lock().token_of(rt))
}

/// `run` without a runtime, for `caller`: a guest's run joins its lineage
/// one level deeper and holds one VM of its budget (for as long as the run
/// lasts, or as its kept runtime lives).
pub(super) async fn fresh(
    m: &Manager,
    caller: &Caller,
    lang: Lang,
    code: &str,
    keep: Keep,
    timeout_ms: u64,
    sink: Option<&Arc<Sink>>,
) -> Result<RunResponse, RunError> {
    let session = (keep == Keep::Session).then(Session::default);
    let keep = keep != Keep::Nothing;
    let admitted = m.tenants.admit(caller).map_err(RunError::Tenant)?;
    let daemon = |e| DaemonFailure::new(e, timeout_ms);
    let uses_iii = guest::names_iii(code);
    // One token per run; a kept run's becomes its runtime's.
    let token = m.mint_guest_token(None, &admitted);
    let (p, secret) = run_exec(m, lang, code, timeout_ms);
    let mut attempt = 0;
    let (vm, (out, state), line) = loop {
        attempt += 1;
        let acquired = acquire::acquire(m, lang, uses_iii)
            .await
            .map_err(|e| RunError::AcquireVm(daemon(e)))?;
        let (vm, pooled) = (acquired.vm, acquired.pooled);
        let line = if keep { None } else { lifeline::start(m, &vm) };
        let outcome = async {
            if uses_iii && !vm.has_sdk() {
                m.prepare_sdk(&vm, true)
                    .await
                    .map_err(|e| RunError::PrepareSdk(daemon(e)))?;
            }
            vm.tenant_code_ran();
            let then = if keep { Then::ServesAgain } else { Then::Done };
            let p = with_token(p.clone(), token.as_ref());
            exec_streamed(m, &vm, session.as_ref(), p, then, sink).await
        }
        .await;
        drop(acquired.refill);
        match outcome {
            Ok(out) => break (vm, out, line),
            // A pooled VM reaped while it waited is replaced silently.
            Err(e) if pooled && e.vm_gone() && attempt == 1 => {
                vm.gone();
                continue;
            }
            // The daemon holds one exec per sandbox, and the lifeline took
            // it: without lifelines, once more on another VM.
            Err(e) if line.is_some() && e.exec_cap() && attempt == 1 => {
                lifeline::turn_off(m);
                vm.stop().await;
                continue;
            }
            Err(e) => {
                lifeline::stop_until_gone(vm, line).await;
                return Err(e);
            }
        }
    };
    let lineage = admitted.lineage.clone();
    if keep && out.exit_code == Some(0) && !m.tenants.root_alive(&lineage) {
        // Its root ended while it ran: nobody could reach it.
        drop(token);
        vm.stop().await;
        return Err(RunError::LineageEnded);
    }
    if keep && out.exit_code == Some(0) {
        let id = RuntimeId::generate();
        // Runs into one kept runtime stay one at a time (docs/contract.md).
        let (rt, held) = Runtime::new(id.clone(), vm, None, 1, token, admitted, session);
        rt.meta.used(Duration::from_millis(out.duration_ms));
        m.book.lock().adopt(rt.clone(), held);
        lifecycle::runtime(m, EventKind::RuntimeCreated, &rt, None);
        tracing::info!(lang = %lang, "kept a runtime");
        return Ok(response(
            m,
            out,
            &secret,
            Some(id.expose().to_string()),
            state,
        ));
    }
    // One-shot, or a failed keep run: the VM never serves anyone again,
    // and its token is revoked before the caller hears back.
    drop(token);
    let _budget_until_the_vm_is_gone = admitted.permit;
    // A trusted one-shot was its lineage's root: what its guest code kept
    // ends with it.
    if admitted.root.is_some() {
        drop(admitted.root);
        teardown::lineage_end(m, &lineage);
    }
    if keep {
        vm.stop().await;
    } else {
        stop_oneshot(m, vm, line).await;
    }
    Ok(response(m, out, &secret, None, state))
}

/// The stop of a one-shot VM: the response waits until the VM is gone
/// (default), until the daemon confirms the stop, or not at all.
async fn stop_oneshot(m: &Manager, vm: VmLease, line: Option<Lifeline>) {
    match m.config.oneshot_stop {
        OneshotStop::Background => drop(vm.stop_in_background()),
        _ => lifeline::stop_until_gone(vm, line).await,
    }
}

/// `run` in a kept runtime.
pub(super) async fn in_runtime(
    m: &Manager,
    id: &RuntimeId,
    lang: Option<Lang>,
    session: Option<bool>,
    code: &str,
    timeout_ms: u64,
    sink: Option<&Arc<Sink>>,
) -> Result<RunResponse, RunError> {
    let rt = m.book.lock().runtime(id).ok_or(RunError::UnknownRuntime)?;
    if lang.is_some_and(|l| l != rt.lang()) {
        return Err(RunError::LangMismatch { runs: rt.lang() });
    }
    let kept = rt.session.is_some();
    if let Some(asked) = session.filter(|a| *a != kept) {
        return Err(RunError::SessionMismatch { kept, asked });
    }
    let daemon = |e| DaemonFailure::new(e, timeout_ms);
    let (p, secret) = run_exec(m, rt.lang(), code, timeout_ms);
    let slot = rt.slots.acquire(KEPT_RUNS).await;
    let timed = super::meta::Timed::start(&rt.meta);
    let outcome = async {
        if !rt.vm.has_sdk() && guest::names_iii(code) {
            m.prepare_sdk(&rt.vm, rt.vm.pristine())
                .await
                .map_err(|e| RunError::PrepareSdk(daemon(e)))?;
        }
        rt.vm.tenant_code_ran();
        let p = for_runtime(m, &rt, p);
        exec_streamed(m, &rt.vm, rt.session.as_ref(), p, Then::ServesAgain, sink).await
    }
    .await;
    drop(timed);
    drop(slot);
    match outcome {
        Ok((out, state)) => Ok(response(
            m,
            out,
            &secret,
            Some(id.expose().to_string()),
            state,
        )),
        Err(e) if e.vm_gone() => {
            teardown::expire(m, &rt);
            Err(RunError::Expired)
        }
        Err(e) => Err(e),
    }
}
