//! The one door to the daemon: every `sandbox::*` call the worker makes
//! goes through [`Daemon`], which charges it to the current operation
//! (`crate::metering`) and counts its time as the daemon's. Nothing else in
//! the crate holds the sandbox client.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::vms::SandboxId;
use crate::ids::Lang;
use crate::metering::{charge, charge_to, charge_wait, OpTotals};
use crate::sandbox::{
    CreateParams, ExecOutput, ExecParams, ListedSandbox, SandboxApi, SandboxError, Streamed,
};

/// The sandbox client, behind calls that are each charged.
pub(crate) struct Daemon {
    api: Arc<dyn SandboxApi>,
    /// What every VM of this worker is created with but its image.
    template: CreateParams,
}

impl Daemon {
    /// `name`: this process's VM name; `idle_timeout_secs`: the daemon's
    /// reap; `guest_url`: where a guest's `iii` connects.
    pub(crate) fn new(
        api: Arc<dyn SandboxApi>,
        name: String,
        idle_timeout_secs: u64,
        guest_url: String,
    ) -> Daemon {
        Daemon {
            api,
            template: CreateParams {
                image: String::new(),
                name,
                idle_timeout_secs,
                // The guest's `iii` rides the sandbox network gateway.
                network: true,
                env: [("III_URL".to_string(), guest_url)].into(),
            },
        }
    }

    async fn call<T>(&self, bytes_planted: u64, call: impl Future<Output = T>) -> T {
        charge(1, bytes_planted);
        self.waited(call).await
    }

    /// Time the caller spends waiting on the daemon's work without a call
    /// of its own (a stop racing a lifeline): charged as the daemon's.
    pub(crate) async fn waited<T>(&self, work: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = work.await;
        charge_wait(start.elapsed());
        out
    }

    /// Runs `call` (one daemon call made through this door) in the
    /// background, nobody waiting for it: it is charged to `to` now, as one
    /// call and no wait, so an operation's figures are complete when it
    /// answers.
    pub(crate) fn detached<F>(
        to: Option<Arc<OpTotals>>,
        call: F,
    ) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if let Some(to) = &to {
            charge_to(to, 1, 0);
        }
        tokio::spawn(call)
    }

    pub(crate) async fn create(&self, lang: Lang) -> Result<SandboxId, SandboxError> {
        let params = CreateParams {
            image: lang.image().to_string(),
            ..self.template.clone()
        };
        self.call(0, self.api.create(params))
            .await
            .map(SandboxId::new)
    }

    /// Every sandbox the daemon holds (of every owner).
    pub(crate) async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError> {
        self.call(0, self.api.list()).await
    }

    pub(crate) async fn exec(
        &self,
        id: &SandboxId,
        p: ExecParams,
    ) -> Result<ExecOutput, SandboxError> {
        self.call(0, self.api.exec(id.as_str(), p)).await
    }

    pub(crate) async fn stop(&self, id: &SandboxId) -> Result<(), SandboxError> {
        self.call(0, self.api.stop(id.as_str())).await
    }

    pub(crate) async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        content: &str,
    ) -> Result<(), SandboxError> {
        self.call(
            content.len() as u64,
            self.api.write_file(id.as_str(), path, content),
        )
        .await
    }

    /// A big file through a data channel (`NoChannels`: nothing was called
    /// or written, so nothing is charged; write it inline).
    pub(crate) async fn write_streamed(
        &self,
        id: &SandboxId,
        path: &str,
        content: Arc<str>,
    ) -> Result<Streamed, SandboxError> {
        let bytes = content.len() as u64;
        let start = Instant::now();
        let out = self.api.write_streamed(id.as_str(), path, content).await;
        match out {
            Ok(Streamed::NoChannels) => return out,
            Ok(Streamed::Written) => charge(1, bytes),
            Err(_) => charge(1, 0),
        }
        charge_wait(start.elapsed());
        out
    }

    /// A file out of the VM through a data channel (`None`: no channels).
    pub(crate) async fn read_streamed(
        &self,
        id: &SandboxId,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        self.call(0, self.api.read_streamed(id.as_str(), path, limit))
            .await
    }
}
