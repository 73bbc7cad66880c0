//! Pre-started interpreters, the manager's side: the one exec a call or run
//! in a VM becomes. With an interpreter waiting there, the call is relayed
//! into it: python's fork server forks the call a fresh child and keeps
//! waiting; a node interpreter serves the call and, in a VM that serves
//! later calls, the next one starts as it ends. Without one, the call runs
//! cold as it always did, starting one for the next call. Either way the
//! call gets a fresh process.

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

impl Manager {
    /// One call or run `p` (a wrapper exec of `lang`) in `sandbox_id`.
    pub(super) async fn exec_call(
        &self,
        sandbox_id: &str,
        lang: Lang,
        p: ExecParams,
        then: Then,
    ) -> Result<ExecOutput, SandboxError> {
        if !self.config.prestart {
            return self.exec(sandbox_id, p).await;
        }
        let again = then == Then::ServesAgain;
        let Some(waiting) = self.ready.take(sandbox_id) else {
            return self.cold(sandbox_id, lang, p, again).await;
        };
        // Python's fork server serves every call of the VM; a node
        // interpreter serves one, and the next one starts as it ends.
        let replaced = lang == Lang::Node || waiting.stale;
        let next = (again && replaced).then(|| self.ready.next());
        let timeout_ms = p.timeout_ms;
        let relayed = self
            .exec(
                sandbox_id,
                prestart::relay_exec(lang, waiting.generation, next, &p),
            )
            .await;
        let keeps = match next {
            Some(n) => Some(n),
            None if again && !replaced => Some(waiting.generation),
            None => None,
        };
        self.waiting_after(sandbox_id, keeps, &relayed);
        match prestart::verdict(relayed?, timeout_ms) {
            Verdict::Ran(out) => Ok(out),
            Verdict::TimedOut(e) => Err(e),
            Verdict::Cold => {
                tracing::debug!("the pre-started interpreter was gone; the call runs cold");
                // A node relay started the next one already; a python
                // server that is gone must be started again.
                let restart = again && next.is_none();
                if restart {
                    self.ready.forget(sandbox_id);
                }
                self.cold(sandbox_id, lang, p, restart).await
            }
        }
    }

    /// `p` as it always ran, starting an interpreter for the next call when
    /// the VM serves again.
    async fn cold(
        &self,
        sandbox_id: &str,
        lang: Lang,
        p: ExecParams,
        again: bool,
    ) -> Result<ExecOutput, SandboxError> {
        let next = again.then(|| self.ready.next());
        let cold = match next {
            Some(n) => prestart::cold_then_spawn(lang, n, p),
            None => p,
        };
        let out = self.exec(sandbox_id, cold).await;
        self.waiting_after(sandbox_id, next, &out);
        out
    }

    /// The guest SDK was just planted in `sandbox_id`: what waits there
    /// started without it and is replaced at the next call.
    pub(super) fn sdk_planted(&self, sandbox_id: &str) {
        self.ready.mark_stale(sandbox_id);
    }

    /// Starts an interpreter waiting in a VM no call is using (a pooled one,
    /// once it is prepared). A failure only means the first call runs cold.
    pub(super) async fn start_waiting(&self, sandbox_id: &str, lang: Lang) {
        if !self.config.prestart {
            return;
        }
        let n = self.ready.next();
        match self.exec(sandbox_id, prestart::spawn_exec(lang, n)).await {
            Ok(_) => self.ready.put(sandbox_id, n),
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "starting a waiting interpreter failed")
            }
        }
    }

    /// A VM that stopped has nothing waiting in it any more.
    pub(super) fn forget_waiting(&self, sandbox_id: &str) {
        self.ready.forget(sandbox_id);
    }

    /// The exec after which generation `next` waits went through (so the
    /// interpreter is there or starting, or the VM is gone and it does not
    /// matter).
    fn waiting_after<T>(&self, sandbox_id: &str, next: Option<u64>, out: &Result<T, SandboxError>) {
        match (next, out) {
            (Some(n), Ok(_)) => self.ready.put(sandbox_id, n),
            (Some(n), Err(e)) if !e.is_gone() => self.ready.put(sandbox_id, n),
            _ => {}
        }
    }
}
