//! The manager's calls on the daemon: every `sandbox::*` call goes through
//! here, so each is charged to the current operation (`crate::metering`), and every
//! VM it creates is in the transient ledger until a record takes it.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::records::Runtime;
use super::{lock, Manager};
use crate::config::OneshotStop;
use crate::error::redact_uuids;
use crate::guest_access::{TokenLease, TOKEN_ENV};
use crate::ids::Lang;
use crate::metering::{charge, charge_wait};
use crate::sandbox::{CreateParams, ExecOutput, ExecParams, SandboxError, Streamed};

impl Manager {
    /// `p` with the guest's token in its env, when it has one.
    pub(super) fn with_token(mut p: ExecParams, token: Option<&TokenLease>) -> ExecParams {
        if let Some(t) = token {
            p.env.insert(TOKEN_ENV.to_string(), t.expose().to_string());
        }
        p
    }

    /// `p` with `rt`'s guest token in its env.
    pub(super) fn for_runtime(rt: &Runtime, p: ExecParams) -> ExecParams {
        Manager::with_token(p, lock(&rt.token).as_ref())
    }

    fn create_params(&self, lang: Lang) -> CreateParams {
        CreateParams {
            image: lang.image().to_string(),
            name: self.naming.vm_name(),
            idle_timeout_secs: self.config.idle_ttl_secs,
            // The guest's `iii` rides the sandbox network gateway.
            network: true,
            env: [(
                "III_URL".to_string(),
                self.config
                    .guest_url
                    .clone()
                    .unwrap_or_else(|| self.guest_engine_url.clone()),
            )]
            .into(),
        }
    }

    /// Every `sandbox::*` call goes through here: it is charged to the
    /// current operation, and the time it takes counts as the daemon's.
    pub(super) async fn on_daemon<T>(
        &self,
        bytes_planted: u64,
        call: impl Future<Output = T>,
    ) -> T {
        charge(1, bytes_planted);
        let start = Instant::now();
        let out = call.await;
        charge_wait(start.elapsed());
        out
    }

    /// Every sandbox the daemon holds (of every owner).
    pub(super) async fn list_vms(
        &self,
    ) -> Result<Vec<crate::sandbox::ListedSandbox>, SandboxError> {
        self.on_daemon(0, self.sandbox.list()).await
    }

    /// A fresh VM no ledger holds yet (the warm pool's own).
    pub(super) async fn create_unrecorded(&self, lang: Lang) -> Result<String, SandboxError> {
        self.on_daemon(0, self.sandbox.create(self.create_params(lang)))
            .await
    }

    /// A fresh VM, held in `transient` until a record takes it or it stops.
    pub(super) async fn create_vm(&self, lang: Lang) -> Result<String, SandboxError> {
        let id = self.create_unrecorded(lang).await?;
        lock(&self.state).track(&id);
        Ok(id)
    }

    /// Stops a tracked VM; once the daemon confirms it gone (a VM it
    /// already dropped is fine) it leaves the ledger. One that would not
    /// stop stays tracked, so shutdown tries again.
    pub(super) async fn stop_vm(&self, sandbox_id: &str) {
        match self.on_daemon(0, self.sandbox.stop(sandbox_id)).await {
            Ok(()) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "stopping a VM failed");
                return;
            }
        }
        lock(&self.state).gone(sandbox_id);
        self.forget_waiting(sandbox_id);
    }

    /// The stop of a one-shot VM: the response waits until the VM is gone
    /// (default), until the daemon confirms the stop, or not at all.
    pub(super) async fn stop_oneshot(
        &self,
        sandbox_id: String,
        line: Option<super::lifeline::Lifeline>,
    ) {
        match self.config.oneshot_stop {
            OneshotStop::Background => self.stop_in_background(sandbox_id),
            _ => self.stop_until_gone(sandbox_id, line).await,
        }
    }

    /// Stops a VM without waiting for it: the stop is the current
    /// operation's cost in calls, not in its caller's wait.
    pub(super) fn stop_in_background(&self, sandbox_id: String) {
        if let Some(me) = self.me.upgrade() {
            charge(1, 0);
            tokio::spawn(async move { me.stop_vm(&sandbox_id).await });
        }
    }

    pub(crate) async fn exec(
        &self,
        sandbox_id: &str,
        p: ExecParams,
    ) -> Result<ExecOutput, SandboxError> {
        self.on_daemon(0, self.sandbox.exec(sandbox_id, p)).await
    }

    pub(crate) async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), SandboxError> {
        self.on_daemon(
            content.len() as u64,
            self.sandbox.write_file(sandbox_id, path, content),
        )
        .await
    }

    /// A big file through a data channel (`NoChannels`: nothing was called
    /// or written, so nothing is charged; write it inline).
    pub(crate) async fn write_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        content: Arc<str>,
    ) -> Result<Streamed, SandboxError> {
        let bytes = content.len() as u64;
        let start = Instant::now();
        let out = self.sandbox.write_streamed(sandbox_id, path, content).await;
        match out {
            Ok(Streamed::NoChannels) => {}
            Ok(Streamed::Written) => charge(1, bytes),
            Err(_) => charge(1, 0),
        }
        if !matches!(out, Ok(Streamed::NoChannels)) {
            charge_wait(start.elapsed());
        }
        out
    }

    /// A file out of the VM through a data channel (`None`: no channels).
    pub(crate) async fn read_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        self.on_daemon(0, self.sandbox.read_streamed(sandbox_id, path, limit))
            .await
    }
}
