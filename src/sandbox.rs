//! The typed client of `sandbox::*`: the only code that names the daemon's
//! functions, reads its `handler error: {json}` envelope, or interprets its
//! S-codes. Above it, failures are [`SandboxError`] values with the S-code
//! kept, and their meaning to the worker is a typed [`Outcome`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::bus::{Bus, BusError, UNSUPPORTED};

/// What the engine says when no worker serves `sandbox::*`.
pub const INSTALL_HINT: &str =
    "iii-sandbox is not installed or not connected; add it with `iii trigger compose::add worker=iii-sandbox`";

/// Extra bus deadline beyond an exec's own budget. It lets the daemon's
/// S200 (with its S-code) arrive before our client-side timeout would.
const EXEC_GRACE: Duration = Duration::from_secs(30);
/// Deadline of the quick calls (create, stop, list, fs).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of one attempt of a quick call that may be made again
/// (`BusSandbox::call_idempotent`): far above what one takes (milliseconds),
/// so only a lost answer runs into it.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// A failed sandbox call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SandboxError {
    #[error("{INSTALL_HINT}")]
    NotInstalled,
    /// The daemon refused, with its S-code.
    #[error("iii-sandbox {code}: {message}")]
    Daemon {
        code: String,
        message: String,
        retryable: bool,
    },
    /// The bus failed before the daemon answered (timeout, disconnect, a
    /// payload the daemon's SDK refused).
    #[error("bus error {0}")]
    Bus(#[source] BusError),
    /// The VM's image could not be made read-only (`seal`): nothing ran.
    #[error("the VM could not be sealed: {0}")]
    Unsealed(String),
}

/// What a failed sandbox call means to the worker: the one place where the
/// daemon's S-codes are decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome<'a> {
    /// No worker serves `sandbox::*`.
    NotInstalled,
    /// The daemon no longer knows the VM: stopped or reaped (S002, S004).
    Gone { code: &'a str, message: &'a str },
    /// The daemon has no room for another VM (S400).
    Capacity { code: &'a str, message: &'a str },
    /// The sandbox already has its most execs in flight (S003).
    ExecCap { code: &'a str, message: &'a str },
    /// The VM cannot be reached or disconnected mid-exec (S300): it is no
    /// more, or never booted.
    VmDown { code: &'a str, message: &'a str },
    /// The exec ran out of its budget (S200).
    Timeout,
    /// Any other refusal of the daemon.
    Refused { code: &'a str, message: &'a str },
    /// The bus failed before the daemon answered.
    Bus(&'a BusError),
    /// A mount of the VM stayed writable, so the worker ran nothing in it.
    Unsealed { message: &'a str },
}

impl SandboxError {
    /// The daemon's S-code, if it answered with one.
    pub fn s_code(&self) -> Option<&str> {
        match self {
            SandboxError::Daemon { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The daemon is not on the bus at all (nothing serves `sandbox::*`).
    pub fn is_not_installed(&self) -> bool {
        matches!(self.outcome(), Outcome::NotInstalled)
    }

    /// What this failure means to the worker.
    pub(crate) fn outcome(&self) -> Outcome<'_> {
        match self {
            SandboxError::NotInstalled => Outcome::NotInstalled,
            SandboxError::Daemon { code, message, .. } => match code.as_str() {
                "S002" | "S004" => Outcome::Gone { code, message },
                "S400" => Outcome::Capacity { code, message },
                "S003" => Outcome::ExecCap { code, message },
                "S300" => Outcome::VmDown { code, message },
                "S200" => Outcome::Timeout,
                _ => Outcome::Refused { code, message },
            },
            SandboxError::Bus(b) => Outcome::Bus(b),
            SandboxError::Unsealed(message) => Outcome::Unsealed { message },
        }
    }

    /// Whether the daemon no longer knows the VM (stopped or reaped).
    pub(crate) fn is_gone(&self) -> bool {
        matches!(self.outcome(), Outcome::Gone { .. })
    }

    /// Whether the daemon refused an exec because the sandbox already has
    /// its most execs in flight (S003).
    pub(crate) fn is_exec_cap(&self) -> bool {
        matches!(self.outcome(), Outcome::ExecCap { .. })
    }

    /// Whether an exec failed because its VM is no more: it disconnected
    /// mid-run or cannot be reached (S300), or the daemon dropped it.
    pub(crate) fn shows_vm_gone(&self) -> bool {
        matches!(
            self.outcome(),
            Outcome::VmDown { .. } | Outcome::Gone { .. }
        )
    }

    /// Whether the daemon refused for lack of capacity.
    pub(crate) fn is_capacity(&self) -> bool {
        matches!(self.outcome(), Outcome::Capacity { .. })
    }

    /// Classifies a bus error from a `sandbox::*` call.
    /// The daemon's answer to an exec past its deadline (S200), for a
    /// deadline enforced on its behalf (a pre-started interpreter's relay).
    pub(crate) fn exec_timed_out(timeout_ms: u64) -> SandboxError {
        SandboxError::Daemon {
            code: "S200".into(),
            message: format!("exec timed out after {timeout_ms} ms"),
            retryable: false,
        }
    }

    pub(crate) fn from_bus(e: BusError) -> SandboxError {
        if e.code == "function_not_found" {
            return SandboxError::NotInstalled;
        }
        if let Some(start) = e.message.find('{') {
            if let Ok(Value::Object(body)) = serde_json::from_str::<Value>(&e.message[start..]) {
                if let Some(code) = body.get("code").and_then(Value::as_str) {
                    return SandboxError::Daemon {
                        code: code.to_string(),
                        message: body
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        retryable: body
                            .get("retryable")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    };
                }
            }
        }
        SandboxError::Bus(e)
    }
}

/// Parameters of `sandbox::create` this worker uses.
#[derive(Debug, Clone, Default)]
pub struct CreateParams {
    pub image: String,
    pub name: String,
    pub idle_timeout_secs: u64,
    pub network: bool,
    pub env: BTreeMap<String, String>,
}

/// Parameters of `sandbox::exec`: always the `argv` form, so nothing is
/// shell-split.
#[derive(Clone, Default)]
pub struct ExecParams {
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub env: BTreeMap<String, String>,
    pub timeout_ms: u64,
    pub workdir: Option<String>,
    /// Set on a streamed run's exec (and carried by whatever exec it
    /// becomes): the exec copies its output where the run's follower reads
    /// it (`VmLease::exec` puts the copy in front).
    pub(crate) stream: Option<crate::stream::StreamTo>,
}

/// Env values are left out: they carry the guest's token.
impl std::fmt::Debug for ExecParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecParams")
            .field("argv", &self.argv)
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("workdir", &self.workdir)
            .field("streamed", &self.stream.is_some())
            .finish()
    }
}

/// A finished process. A non-zero exit is still this.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
}

#[cfg(test)]
impl ExecOutput {
    /// An exec that printed "o" and `stderr` and exited `code`: what a
    /// verdict is read off.
    pub(crate) fn exited(stderr: &str, code: i32) -> ExecOutput {
        ExecOutput {
            stdout: "o".into(),
            stderr: stderr.into(),
            exit_code: Some(code),
            duration_ms: 1,
        }
    }
}

/// One entry of `sandbox::list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedSandbox {
    pub sandbox_id: String,
    pub name: Option<String>,
}

/// The `sandbox::*` operations the worker uses.
#[async_trait::async_trait]
pub trait SandboxApi: Send + Sync + 'static {
    async fn create(&self, p: CreateParams) -> Result<String, SandboxError>;
    async fn exec(&self, sandbox_id: &str, p: ExecParams) -> Result<ExecOutput, SandboxError>;
    async fn stop(&self, sandbox_id: &str) -> Result<(), SandboxError>;
    async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError>;
    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), SandboxError>;
    /// Writes a big file through a data channel, so the call's payload (and
    /// the span the daemon's SDK records of it) stays a few hundred bytes.
    /// `NoChannels`: nothing was written; write it inline instead.
    async fn write_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        content: Arc<str>,
    ) -> Result<Streamed, SandboxError> {
        let _ = (sandbox_id, path, content);
        Ok(Streamed::NoChannels)
    }
    /// Reads a file out of the VM through the data channel `fs::read`
    /// answers with, so no call payload (or span) carries it. `None`: the
    /// bus has no channels; read it some other way.
    async fn read_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        let _ = (sandbox_id, path, limit);
        Ok(None)
    }
}

/// How a streamed write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streamed {
    Written,
    /// The bus has no data channels (or could not open one just now).
    NoChannels,
}

/// `sandbox::fs::write`'s payload, with `content` a string or a channel ref.
fn write_payload(sandbox_id: &str, path: &str, content: Value) -> Value {
    json!({
        "sandbox_id": sandbox_id,
        "path": path,
        "content": content,
        "parents": true,
    })
}

/// `sandbox::*` over the bus.
pub struct BusSandbox {
    bus: Arc<dyn Bus>,
    /// Cleared for good once the bus shows it has no data channels.
    channels: AtomicBool,
}

impl BusSandbox {
    pub fn new(bus: Arc<dyn Bus>) -> BusSandbox {
        BusSandbox {
            bus,
            channels: AtomicBool::new(true),
        }
    }

    /// Whether `e` shows the bus has no data channels at all (then none is
    /// tried again); any other failure is this one channel's.
    fn note_channel_failure(&self, e: &BusError) -> bool {
        let none = e.code == UNSUPPORTED || e.code == "function_not_found";
        if none {
            self.channels.store(false, Ordering::Relaxed);
        }
        none
    }

    async fn call(
        &self,
        id: &str,
        payload: Value,
        timeout: Duration,
    ) -> Result<Value, SandboxError> {
        self.bus
            .call(id, payload, timeout)
            .await
            .map_err(SandboxError::from_bus)
    }

    /// A quick call whose repeat does no harm (an inline write of the same
    /// bytes, a read, a list), made again when an attempt gets no answer,
    /// within `CONTROL_TIMEOUT` in all. The engine can lose an answer: it
    /// records an invocation it routed to a worker only after sending it,
    /// and drops a result that comes back first (measured on 0.23.0-rc.4,
    /// where one `register_function` in a few dozen waited out its caller
    /// on a lost `sandbox::fs::write` answer; see docs/engine.md).
    async fn call_idempotent(&self, id: &str, payload: Value) -> Result<Value, SandboxError> {
        let deadline = tokio::time::Instant::now() + CONTROL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let attempt = left.min(ATTEMPT_TIMEOUT);
            match self.bus.call(id, payload.clone(), attempt).await {
                Err(e) if e.is_timeout() && left > attempt => {
                    tracing::debug!(
                        function_id = id,
                        "no answer within an attempt's deadline; calling again"
                    );
                }
                answer => return answer.map_err(SandboxError::from_bus),
            }
        }
    }
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[async_trait::async_trait]
impl SandboxApi for BusSandbox {
    async fn create(&self, p: CreateParams) -> Result<String, SandboxError> {
        let out = self
            .call(
                "sandbox::create",
                json!({
                    "image": p.image,
                    "name": p.name,
                    "idle_timeout_secs": p.idle_timeout_secs,
                    "network": p.network,
                    "env": p.env,
                }),
                CONTROL_TIMEOUT,
            )
            .await?;
        let id = str_of(&out, "sandbox_id");
        if id.is_empty() {
            return Err(SandboxError::Bus(BusError::new(
                "BAD_RESPONSE",
                "sandbox::create answered without a sandbox_id",
            )));
        }
        Ok(id)
    }

    async fn exec(&self, sandbox_id: &str, p: ExecParams) -> Result<ExecOutput, SandboxError> {
        let mut payload = json!({
            "sandbox_id": sandbox_id,
            "argv": p.argv,
            "timeout_ms": p.timeout_ms,
        });
        if let Some(stdin) = &p.stdin {
            payload["stdin"] =
                Value::String(base64::engine::general_purpose::STANDARD.encode(stdin));
        }
        if !p.env.is_empty() {
            payload["env"] = json!(p.env);
        }
        if let Some(w) = &p.workdir {
            payload["workdir"] = json!(w);
        }
        let deadline = Duration::from_millis(p.timeout_ms) + EXEC_GRACE;
        let out = self.call("sandbox::exec", payload, deadline).await?;
        Ok(ExecOutput {
            stdout: str_of(&out, "stdout"),
            stderr: str_of(&out, "stderr"),
            exit_code: out
                .get("exit_code")
                .and_then(Value::as_i64)
                .map(|c| c.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            duration_ms: out.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        })
    }

    async fn stop(&self, sandbox_id: &str) -> Result<(), SandboxError> {
        self.call(
            "sandbox::stop",
            json!({ "sandbox_id": sandbox_id }),
            CONTROL_TIMEOUT,
        )
        .await
        .map(|_| ())
    }

    async fn list(&self) -> Result<Vec<ListedSandbox>, SandboxError> {
        let out = self.call_idempotent("sandbox::list", json!({})).await?;
        Ok(out
            .get("sandboxes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|s| ListedSandbox {
                        sandbox_id: str_of(s, "sandbox_id"),
                        name: s.get("name").and_then(Value::as_str).map(str::to_string),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), SandboxError> {
        self.call_idempotent(
            "sandbox::fs::write",
            write_payload(sandbox_id, path, json!(content)),
        )
        .await
        .map(|_| ())
    }

    async fn write_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        content: Arc<str>,
    ) -> Result<Streamed, SandboxError> {
        if !self.channels.load(Ordering::Relaxed) {
            return Ok(Streamed::NoChannels);
        }
        let reader = match self.bus.upload(content).await {
            Ok(reader) => reader,
            Err(e) => {
                self.note_channel_failure(&e);
                tracing::debug!(code = %e.code, "no data channel for a streamed write; writing inline");
                return Ok(Streamed::NoChannels);
            }
        };
        self.call(
            "sandbox::fs::write",
            write_payload(sandbox_id, path, reader),
            CONTROL_TIMEOUT,
        )
        .await
        .map(|_| Streamed::Written)
    }

    async fn read_streamed(
        &self,
        sandbox_id: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        if !self.channels.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let out = self
            .call_idempotent(
                "sandbox::fs::read",
                json!({ "sandbox_id": sandbox_id, "path": path }),
            )
            .await?;
        let Some(reader) = out.get("content").filter(|c| c.is_object()).cloned() else {
            return Ok(None);
        };
        match self.bus.download(reader, limit).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if self.note_channel_failure(&e) => Ok(None),
            Err(e) => Err(SandboxError::Bus(e)),
        }
    }
}

#[cfg(test)]
mod tests;
