//! The `run` operation: one-shot and kept runs on a fresh (or warm) VM, and
//! runs in a kept runtime, one exec at a time.

use std::time::Duration;

use super::errors::{DaemonFailure, RunError};
use super::inventory;
use super::ready::Then;
use super::records::{Runtime, SdkState};
use super::{lock, Manager};
use crate::events::EventKind;
use crate::guest;
use crate::ids::{Lang, RuntimeId};
use crate::sandbox::ExecOutput;
use crate::tenancy::Caller;
use crate::wire::RunResponse;

impl Manager {
    fn response(&self, out: ExecOutput, runtime_id: Option<String>) -> RunResponse {
        let cap = self.config.max_stream_bytes;
        RunResponse {
            stdout: guest::cap_stream(&out.stdout, cap, "stdout"),
            stderr: guest::cap_stream(&out.stderr, cap, "stderr"),
            exit_code: out.exit_code.map(i64::from).unwrap_or(-1),
            success: out.exit_code == Some(0),
            duration_ms: out.duration_ms,
            runtime_id,
        }
    }

    /// `run` without a runtime, from the main listener: one-shot, or keep.
    pub async fn run_fresh(
        &self,
        lang: Lang,
        code: &str,
        keep: bool,
        timeout_ms: u64,
    ) -> Result<RunResponse, RunError> {
        self.run_fresh_as(&Caller::Trusted, lang, code, keep, timeout_ms)
            .await
    }

    /// `run` without a runtime, for `caller`: a guest's run joins its
    /// lineage one level deeper and holds one VM of its budget (for as long
    /// as the run lasts, or as its kept runtime lives).
    pub async fn run_fresh_as(
        &self,
        caller: &Caller,
        lang: Lang,
        code: &str,
        keep: bool,
        timeout_ms: u64,
    ) -> Result<RunResponse, RunError> {
        let admitted = self.tenants.admit(caller).map_err(RunError::Tenant)?;
        let daemon = |e| DaemonFailure::new(e, timeout_ms);
        let uses_iii = guest::names_iii(code);
        // One token per run; a kept run's becomes its runtime's.
        let token = self.mint_guest_token(None, &admitted);
        let mut attempt = 0;
        let (sandbox_id, out, sdk_in_vm, line) = loop {
            attempt += 1;
            let vm = self
                .acquire_vm(lang, uses_iii)
                .await
                .map_err(|e| RunError::AcquireVm(daemon(e)))?;
            let (sandbox_id, pooled) = (vm.id, vm.pooled);
            let line = if keep {
                None
            } else {
                self.lifeline(&sandbox_id)
            };
            let outcome = async {
                if uses_iii && !vm.sdk {
                    self.prepare_sdk(&sandbox_id, lang, true)
                        .await
                        .map_err(|e| RunError::PrepareSdk(daemon(e)))?;
                }
                let then = if keep { Then::ServesAgain } else { Then::Done };
                self.exec_call(
                    &sandbox_id,
                    lang,
                    Manager::with_token(guest::run_exec(lang, code, timeout_ms), token.as_ref()),
                    then,
                )
                .await
                .map_err(|e| RunError::Exec(daemon(e)))
            }
            .await;
            match outcome {
                Ok(out) => break (sandbox_id, out, vm.sdk, line),
                // A pooled VM reaped while it waited is replaced silently.
                Err(e) if pooled && e.vm_gone() && attempt == 1 => {
                    lock(&self.state).gone(&sandbox_id);
                    continue;
                }
                // The daemon holds one exec per sandbox, and the lifeline
                // took it: without lifelines, once more on another VM.
                Err(e) if line.is_some() && e.exec_cap() && attempt == 1 => {
                    self.lifelines.turn_off();
                    self.stop_vm(&sandbox_id).await;
                    continue;
                }
                Err(e) => {
                    self.stop_until_gone(sandbox_id, line).await;
                    return Err(e);
                }
            }
        };
        let lineage = admitted.lineage.clone();
        if keep && out.exit_code == Some(0) && !self.lineage_lives(&lineage) {
            // Its root ended while it ran: nobody could reach it.
            drop(token);
            self.stop_vm(&sandbox_id).await;
            return Err(RunError::LineageEnded);
        }
        if keep && out.exit_code == Some(0) {
            let id = RuntimeId::generate();
            let sdk = if uses_iii || sdk_in_vm {
                SdkState::Prepared
            } else {
                SdkState::Absent
            };
            let rt = Runtime::new(
                id.clone(),
                sandbox_id.clone(),
                lang,
                None,
                sdk,
                token,
                admitted,
            );
            rt.meta.used(Duration::from_millis(out.duration_ms));
            lock(&self.state).adopt(rt.clone());
            self.lifecycle(EventKind::RuntimeCreated, &rt, None);
            tracing::info!(lang = %lang, "kept a runtime");
            return Ok(self.response(out, Some(id.expose().to_string())));
        }
        // One-shot, or a failed keep run: the VM never serves anyone again,
        // and its token is revoked before the caller hears back.
        drop(token);
        let _budget_until_the_vm_is_gone = admitted.permit;
        // A trusted one-shot was its lineage's root: what its guest code
        // kept ends with it.
        if admitted.root.is_some() {
            drop(admitted.root);
            self.end_lineage(&lineage);
        }
        if keep {
            self.stop_vm(&sandbox_id).await;
        } else {
            self.stop_oneshot(sandbox_id, line).await;
        }
        Ok(self.response(out, None))
    }

    /// `run` in a kept runtime.
    pub async fn run_in(
        &self,
        id: &RuntimeId,
        lang: Option<Lang>,
        code: &str,
        timeout_ms: u64,
    ) -> Result<RunResponse, RunError> {
        let rt = lock(&self.state)
            .runtime(id)
            .ok_or(RunError::UnknownRuntime)?;
        if lang.is_some_and(|l| l != rt.lang) {
            return Err(RunError::LangMismatch { runs: rt.lang });
        }
        let daemon = |e| DaemonFailure::new(e, timeout_ms);
        let mut slot = rt.slot.lock().await;
        let timed = inventory::Timed::start(&rt.meta);
        let outcome = async {
            if slot.sdk == SdkState::Absent && guest::names_iii(code) {
                self.prepare_sdk(&rt.sandbox_id, rt.lang, slot.pristine)
                    .await
                    .map_err(|e| RunError::PrepareSdk(daemon(e)))?;
                slot.sdk = SdkState::Prepared;
            }
            slot.pristine = false;
            self.exec_call(
                &rt.sandbox_id,
                rt.lang,
                Manager::for_runtime(&rt, guest::run_exec(rt.lang, code, timeout_ms)),
                Then::ServesAgain,
            )
            .await
            .map_err(|e| RunError::Exec(daemon(e)))
        }
        .await;
        drop(timed);
        drop(slot);
        match outcome {
            Ok(out) => Ok(self.response(out, Some(id.expose().to_string()))),
            Err(e) if e.vm_gone() => {
                self.expire(&rt);
                Err(RunError::Expired)
            }
            Err(e) => Err(e),
        }
    }
}
