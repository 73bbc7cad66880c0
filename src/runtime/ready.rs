//! Pre-started interpreters, the manager's side: the one exec a call or run
//! in a VM becomes. With an interpreter waiting there, the call is relayed
//! into it (and, in a VM that serves later calls, the next one starts while
//! it runs); without one, it runs cold as it always did, starting one for
//! the next call. Either way the call gets a fresh process.

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
        let next = (then == Then::ServesAgain).then(|| self.ready.next());
        let Some(using) = self.ready.take(sandbox_id) else {
            let cold = match next {
                Some(n) => prestart::cold_then_spawn(lang, n, p),
                None => p,
            };
            let out = self.exec(sandbox_id, cold).await;
            self.waiting_after(sandbox_id, next, &out);
            return out;
        };
        let timeout_ms = p.timeout_ms;
        let relayed = self
            .exec(sandbox_id, prestart::relay_exec(lang, using, next, &p))
            .await;
        self.waiting_after(sandbox_id, next, &relayed);
        match prestart::verdict(relayed?, timeout_ms) {
            Verdict::Ran(out) => Ok(out),
            Verdict::TimedOut(e) => Err(e),
            Verdict::Cold => {
                tracing::debug!("the pre-started interpreter was gone; the call runs cold");
                self.exec(sandbox_id, p).await
            }
        }
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

    /// The exec that was to start generation `next` went through (so the
    /// interpreter is starting, or the VM is gone and it does not matter).
    fn waiting_after<T>(&self, sandbox_id: &str, next: Option<u64>, out: &Result<T, SandboxError>) {
        match (next, out) {
            (Some(n), Ok(_)) => self.ready.put(sandbox_id, n),
            (Some(n), Err(e)) if !e.is_gone() => self.ready.put(sandbox_id, n),
            _ => {}
        }
    }
}
