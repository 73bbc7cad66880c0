//! `sandbox::run`: create → write files → write the code → exec → stop, in
//! one call, as the daemon composes it. It always creates with
//! `network:false` and the default idle timeout; a failed step keeps its
//! inner S-code and names the step in the message and in `fix`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::daemon::Daemon;
use super::error::DaemonError;
use super::exec::{handle_exec, EnvShape, ExecRequest};
use super::fs_ops::{handle_write, WriteContent, WriteRequest};
use super::lifecycle::{handle_create, handle_stop, CreateRequest, StopRequest};

/// A file dropped into the sandbox before the code runs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct RunFile {
    /// Absolute guest path (parents are created).
    pub(crate) path: String,
    /// UTF-8 body.
    pub(crate) content: String,
}

/// `sandbox::run` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct RunRequest {
    /// Catalog image, as for `sandbox::create`.
    pub(crate) image: String,
    /// The code, written to `/tmp/run.<ext>`.
    pub(crate) code: String,
    /// `node|js|javascript`, `python|py`, `shell|sh|bash`, or an
    /// interpreter path.
    pub(crate) lang: String,
    /// Extra files.
    #[serde(default)]
    pub(crate) files: Vec<RunFile>,
    /// Environment of the sandbox and of the interpreter.
    #[serde(default)]
    pub(crate) env: EnvShape,
    /// Base64 stdin.
    #[serde(default)]
    pub(crate) stdin: Option<String>,
    /// Interpreter timeout in ms.
    #[serde(default)]
    pub(crate) timeout_ms: Option<u64>,
    /// Leave the sandbox running and return its id.
    #[serde(default)]
    pub(crate) keep_sandbox: bool,
}

/// `sandbox::run` response: the exec's fields, plus `sandbox_id` when kept.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct SandboxRunResponse {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) duration_ms: u64,
    pub(crate) success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sandbox_id: Option<String>,
}

/// `(interpreter, script extension)` for a `lang`; unknown values are an
/// interpreter path with a `.txt` script.
fn interpreter(lang: &str) -> (&str, &'static str) {
    match lang {
        "node" | "js" | "javascript" => ("node", "js"),
        "python" | "py" => ("python3", "py"),
        "shell" | "sh" | "bash" => ("/bin/sh", "sh"),
        other => (other, "txt"),
    }
}

async fn stop_quietly(d: &Daemon, sandbox_id: &str) {
    let req = StopRequest {
        sandbox_id: sandbox_id.to_string(),
        wait: false,
    };
    if let Err(e) = handle_stop(d, req).await {
        tracing::warn!(sandbox_id, error = %e, "sandbox::run cleanup stop failed");
    }
}

/// Handles `sandbox::run`.
pub(crate) async fn handle_run(
    d: &Daemon,
    req: RunRequest,
) -> Result<SandboxRunResponse, DaemonError> {
    let created = handle_create(
        d,
        CreateRequest {
            image: req.image.clone(),
            cpus: None,
            memory_mb: None,
            name: None,
            network: None,
            idle_timeout_secs: None,
            env: req.env.clone(),
        },
    )
    .await
    .map_err(|e| DaemonError::run_step("create", "", e))?;
    let id = created.sandbox_id;
    let keep = req.keep_sandbox;

    let fail = |step: &'static str, e: DaemonError| DaemonError::run_step(step, &id, e);

    let write = |path: String, content: String| WriteRequest {
        sandbox_id: id.clone(),
        path,
        mode: "0644".to_string(),
        parents: true,
        content: Some(WriteContent::Utf8(content)),
        content_b64: None,
    };

    for f in &req.files {
        if let Err(e) = handle_write(d, write(f.path.clone(), f.content.clone())).await {
            if !keep {
                stop_quietly(d, &id).await;
            }
            return Err(fail("fs::write (sibling file)", e));
        }
    }

    let (interp, ext) = interpreter(&req.lang);
    let script = format!("/tmp/run.{ext}");
    if let Err(e) = handle_write(d, write(script.clone(), req.code.clone())).await {
        if !keep {
            stop_quietly(d, &id).await;
        }
        return Err(fail("fs::write (code)", e));
    }

    let exec = ExecRequest {
        sandbox_id: id.clone(),
        cmd: interp.to_string(),
        args: vec![script],
        argv: Vec::new(),
        stdin: req.stdin,
        env: req.env,
        timeout_ms: req.timeout_ms,
        workdir: None,
    };
    let result = handle_exec(d, exec).await;
    if !keep {
        stop_quietly(d, &id).await;
    }
    let resp = result.map_err(|e| fail("exec", e))?;
    Ok(SandboxRunResponse {
        stdout: resp.stdout,
        stderr: resp.stderr,
        exit_code: resp.exit_code,
        timed_out: resp.timed_out,
        duration_ms: resp.duration_ms,
        success: resp.success,
        sandbox_id: keep.then_some(id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("node", "node", "js")]
    #[case("javascript", "node", "js")]
    #[case("py", "python3", "py")]
    #[case("bash", "/bin/sh", "sh")]
    #[case("/usr/bin/perl", "/usr/bin/perl", "txt")]
    fn languages(#[case] lang: &str, #[case] interp: &str, #[case] ext: &str) {
        assert_eq!(interpreter(lang), (interp, ext));
    }
}
