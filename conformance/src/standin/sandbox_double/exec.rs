//! `sandbox::exec`: request shapes, command resolution, and running one
//! command in a sandbox, with the daemon's validation order and answers.
//!
//! Order of checks, as on the daemon: sandbox_id (S001) → cmd/args/argv
//! shape (S001) → empty command (S001) → env names (S001) → admission
//! (S002 / S004 / S003) → stdin base64 (S001) → run. The run itself answers
//! S200 on timeout (after the exec's process group is gone), a synthetic 127 /
//! 126 response when the binary is missing / not executable, and a normal
//! response for any exit status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::daemon::{parse_id, wait_for_boot, Daemon};
use super::error::DaemonError;
use super::guest_path::{GuestView, Region};
use super::isolation::{ExecSpec, ExitKind, ProcHandle};
use super::registry::Registry;

/// Default `timeout_ms`, before the `max_exec_timeout_ms` clamp.
pub(crate) const DEFAULT_EXEC_TIMEOUT_MS: u64 = 300_000;

/// PATH of a guest whose env sets none: the daemon's default guest PATH.
pub(crate) const DEFAULT_GUEST_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// HOME of every guest.
pub(crate) const GUEST_HOME: &str = "/root";

/// How long a killed exec may take to be fully reaped.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// What the daemon reports when a guest dies under a running exec.
pub(crate) const VM_GONE: &str = "shell run: session terminated: vm disconnected mid-run";

/// Environment input: `["K=V", …]` or `{"K": "V"}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum EnvShape {
    /// `["K=V", …]`, passed through unvalidated as on the daemon.
    List(Vec<String>),
    /// `{"K": "V"}`; names must match `[A-Za-z_][A-Za-z0-9_]*`.
    Map(BTreeMap<String, String>),
}

impl Default for EnvShape {
    fn default() -> Self {
        EnvShape::List(Vec::new())
    }
}

impl EnvShape {
    /// Normalises to `K=V` strings; S001 lists bad names of the map form.
    pub(crate) fn into_kv_vec(self) -> Result<Vec<String>, DaemonError> {
        match self {
            EnvShape::List(v) => Ok(v),
            EnvShape::Map(m) => {
                let bad: Vec<&String> = m.keys().filter(|k| !valid_env_name(k)).collect();
                if !bad.is_empty() {
                    return Err(DaemonError::InvalidRequest(format!(
                        "env contains invalid variable name(s): {bad:?}. Names must match `[A-Za-z_][A-Za-z0-9_]*`."
                    )));
                }
                Ok(m.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
            }
        }
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits `K=V` strings at the first `=`; entries without one (or with an
/// empty name) cannot be set in an environment and are skipped.
pub(crate) fn parse_kv(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `sandbox::exec` request. Unknown fields are ignored.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct ExecRequest {
    /// UUID returned by `sandbox::create`.
    pub(crate) sandbox_id: String,
    /// Binary to run; with whitespace and no `args` it is shell-split
    /// (no shell: no pipes, no `$VAR`).
    #[serde(default)]
    pub(crate) cmd: String,
    /// Arguments to `cmd`.
    #[serde(default)]
    pub(crate) args: Vec<String>,
    /// Alternative shape: binary then arguments; cannot be mixed with
    /// `cmd`/`args`.
    #[serde(default)]
    pub(crate) argv: Vec<String>,
    /// Base64 bytes for stdin; missing or "" means immediate EOF.
    #[serde(default)]
    pub(crate) stdin: Option<String>,
    /// Environment layered over the create-time env.
    #[serde(default)]
    pub(crate) env: EnvShape,
    /// Kill-after window in ms (default 300000, clamped to the daemon's max).
    #[serde(default)]
    pub(crate) timeout_ms: Option<u64>,
    /// Working directory inside the sandbox (default `/`).
    #[serde(default)]
    pub(crate) workdir: Option<String>,
}

/// `sandbox::exec` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct ExecResponse {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) exit_code: Option<i32>,
    /// Always false: a timeout is the error S200.
    pub(crate) timed_out: bool,
    pub(crate) duration_ms: u64,
    pub(crate) success: bool,
}

impl ExecResponse {
    fn new(stdout: &[u8], stderr: &[u8], exit_code: i32, started: Instant) -> ExecResponse {
        ExecResponse {
            stdout: String::from_utf8_lossy(stdout).into_owned(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            exit_code: Some(exit_code),
            timed_out: false,
            duration_ms: started.elapsed().as_millis() as u64,
            success: exit_code == 0,
        }
    }
}

/// Picks `(cmd, args)` from the three request shapes.
pub(crate) fn resolve_cmd_shape(
    cmd: &str,
    args: &[String],
    argv: &[String],
) -> Result<(String, Vec<String>), DaemonError> {
    if !argv.is_empty() {
        if !cmd.is_empty() || !args.is_empty() {
            return Err(DaemonError::InvalidRequest(format!(
                "`argv` cannot be combined with `cmd` or `args`. Pick one shape. Got argv={argv:?}, cmd={cmd:?}, args={args:?}"
            )));
        }
        return Ok((argv[0].clone(), argv[1..].to_vec()));
    }
    if cmd.chars().any(char::is_whitespace) {
        if !args.is_empty() {
            return Err(DaemonError::InvalidRequest(format!(
                "cmd contains whitespace (shell-line shape) AND `args` is set; that is ambiguous. Either remove whitespace from cmd and pass arguments via `args`, or leave `args` empty so cmd is shlex-split. Got cmd={cmd:?}, args={args:?}"
            )));
        }
        let parts = shlex::split(cmd).ok_or_else(|| {
            DaemonError::InvalidRequest(format!(
                "cmd has unbalanced quotes and cannot be shlex-split: {cmd:?}. Use `argv: [...]` for argv arrays with embedded quotes."
            ))
        })?;
        let mut it = parts.into_iter();
        let head = it.next().ok_or_else(|| {
            DaemonError::InvalidRequest(format!("cmd is empty after shlex split: {cmd:?}"))
        })?;
        return Ok((head, it.collect()));
    }
    Ok((cmd.to_string(), args.to_vec()))
}

/// Decodes `stdin`: missing or "" is immediate EOF.
pub(crate) fn decode_stdin(stdin: Option<&str>) -> Result<Vec<u8>, DaemonError> {
    match stdin {
        None | Some("") => Ok(Vec::new()),
        Some(s) => base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(|e| DaemonError::InvalidRequest(format!("stdin base64 decode: {e}"))),
    }
}

/// The guest environment: defaults, then the create-time env, then the
/// exec's env, later entries replacing earlier ones.
pub(crate) fn layer_env(
    create: &[(String, String)],
    exec: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_GUEST_PATH.into()),
        ("HOME".into(), GUEST_HOME.into()),
    ];
    for (k, v) in create.iter().chain(exec) {
        match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env
}

/// Result of looking a command up in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Guest path to execve.
    Found(String),
    /// ENOENT/ENOTDIR: exit 127.
    NotFound,
    /// EACCES (not executable, or a directory): exit 126.
    Denied,
}

enum Probe {
    Exec,
    Denied,
    Missing,
}

fn probe(view: &GuestView, guest: &str) -> Probe {
    let Ok(r) = view.resolve(guest, true) else {
        return Probe::Missing;
    };
    if r.region == Region::Special {
        return Probe::Missing;
    }
    let Ok(meta) = std::fs::metadata(&r.host) else {
        return Probe::Missing;
    };
    use std::os::unix::fs::PermissionsExt;
    if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
        Probe::Denied
    } else {
        Probe::Exec
    }
}

/// Finds `cmd` as `execvp` would inside the guest: a name with `/` is a
/// path (relative to `workdir`), anything else is searched in `path_var`.
pub(crate) fn lookup(view: &GuestView, cmd: &str, workdir: &str, path_var: &str) -> Lookup {
    let join = |dir: &str, name: &str| {
        let dir = if dir.starts_with('/') {
            dir.to_string()
        } else {
            format!("{}/{dir}", workdir.trim_end_matches('/'))
        };
        format!("{}/{name}", dir.trim_end_matches('/'))
    };
    if cmd.contains('/') {
        let guest = if cmd.starts_with('/') {
            cmd.to_string()
        } else {
            join(".", cmd)
        };
        return match probe(view, &guest) {
            Probe::Exec => Lookup::Found(guest),
            Probe::Denied => Lookup::Denied,
            Probe::Missing => Lookup::NotFound,
        };
    }
    let mut denied = false;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let guest = join(dir, cmd);
        match probe(view, &guest) {
            Probe::Exec => return Lookup::Found(guest),
            Probe::Denied => denied = true,
            Probe::Missing => {}
        }
    }
    if denied {
        Lookup::Denied
    } else {
        Lookup::NotFound
    }
}

/// Whether `workdir` is an existing directory in the guest.
fn workdir_exists(view: &GuestView, workdir: &str) -> bool {
    match view.resolve(workdir, true) {
        Ok(r) if r.region == Region::Special => true,
        Ok(r) => std::fs::metadata(&r.host).is_ok_and(|m| m.is_dir()),
        Err(_) => false,
    }
}

/// Releases the exec slot however the exec ends (even if its future is
/// dropped mid-flight).
struct ExecSlot<'a> {
    registry: &'a Registry,
    id: Uuid,
}

impl Drop for ExecSlot<'_> {
    fn drop(&mut self) {
        self.registry.end_exec(self.id);
    }
}

/// Keeps a spawned exec registered with its sandbox; on drop it is
/// forgotten and, if still running (the call was abandoned), killed.
struct Attached<'a> {
    registry: &'a Registry,
    id: Uuid,
    key: u64,
    handle: Arc<ProcHandle>,
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.registry.detach_proc(self.id, self.key);
        if !self.handle.is_finished() {
            self.handle.signal(libc::SIGKILL);
        }
    }
}

/// Handles `sandbox::exec`.
pub(crate) async fn handle_exec(d: &Daemon, req: ExecRequest) -> Result<ExecResponse, DaemonError> {
    let id = parse_id(&req.sandbox_id)?;
    let (cmd, args) = resolve_cmd_shape(&req.cmd, &req.args, &req.argv)?;
    if cmd.is_empty() {
        return Err(DaemonError::InvalidRequest(
            "cmd is required and must be non-empty (or pass `argv` with at least one element)"
                .to_string(),
        ));
    }
    let exec_env = parse_kv(&req.env.into_kv_vec()?);
    let guest = d.registry.begin_exec(id)?;
    let _slot = ExecSlot {
        registry: &d.registry,
        id,
    };
    let timeout_ms = req
        .timeout_ms
        .unwrap_or(DEFAULT_EXEC_TIMEOUT_MS)
        .min(d.limits.max_exec_timeout_ms.max(1));
    let stdin = decode_stdin(req.stdin.as_deref())?;

    // The guest's boot, like the command, runs inside the timeout window.
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    if tokio::time::timeout_at(deadline, wait_for_boot(guest.ready_at))
        .await
        .is_err()
    {
        return Err(DaemonError::ExecTimedOut(timeout_ms));
    }

    let env = layer_env(&guest.env, &exec_env);
    let workdir = match req.workdir.as_deref() {
        None | Some("") => "/".to_string(),
        Some(w) if w.starts_with('/') => w.to_string(),
        Some(w) => format!("/{w}"),
    };
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let view = guest.scratch.view();
    // A missing working directory fails the spawn with ENOENT, which the
    // daemon reports like a missing binary.
    let program = if workdir_exists(view, &workdir) {
        lookup(view, &cmd, &workdir, &path_var)
    } else {
        Lookup::NotFound
    };
    let program = match program {
        Lookup::Found(p) => p,
        Lookup::NotFound => {
            return Ok(ExecResponse::new(
                b"",
                format!("exec: {cmd}: not found\n").as_bytes(),
                127,
                started,
            ))
        }
        Lookup::Denied => {
            return Ok(ExecResponse::new(
                b"",
                format!("exec: {cmd}: permission denied\n").as_bytes(),
                126,
                started,
            ))
        }
    };

    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(cmd.clone());
    argv.extend(args);
    let spec = ExecSpec {
        program,
        argv,
        env,
        workdir,
        stdin,
    };
    if !d.registry.is_live(id) {
        return Err(DaemonError::BootFailed(VM_GONE.to_string()));
    }
    // A process started in the sandbox's running init, as on the daemon.
    let running = guest
        .vm
        .spawn(&spec)
        .map_err(|e| DaemonError::BootFailed(format!("shell run: spawn: {e}")))?;
    let handle = running.handle.clone();
    let Some(key) = d.registry.attach_proc(id, handle.clone()) else {
        // Stopped while spawning: the guest is gone.
        handle.kill_and_wait(KILL_PATIENCE).await;
        return Err(DaemonError::BootFailed(VM_GONE.to_string()));
    };
    let _attached = Attached {
        registry: &d.registry,
        id,
        key,
        handle: handle.clone(),
    };

    match tokio::time::timeout_at(deadline, running.outcome()).await {
        Err(_) => {
            // The daemon SIGKILLs the exec's process group; answer only once
            // nothing of that group is left (what left it lives on).
            handle.kill_and_wait(KILL_PATIENCE).await;
            Err(DaemonError::ExecTimedOut(timeout_ms))
        }
        Ok(_) if handle.was_stopped() => Err(DaemonError::BootFailed(VM_GONE.to_string())),
        Ok(outcome) => match outcome.exit {
            ExitKind::Code(code) => Ok(ExecResponse::new(
                &outcome.stdout,
                &outcome.stderr,
                code,
                started,
            )),
            ExitKind::ContainerFailure(reason) => {
                Err(DaemonError::BootFailed(format!("shell run: {reason}")))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::sandbox_double::error::SCode;
    use rstest::rstest;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[rstest]
    #[case("node -v", &[], &[], "node", &["-v"])]
    #[case("node", &["-v"], &[], "node", &["-v"])]
    #[case("", &[], &["python3", "-c", "print(1)"], "python3", &["-c", "print(1)"])]
    #[case("python3 -c 'print(\"a b\")'", &[], &[], "python3", &["-c", "print(\"a b\")"])]
    #[case("echo $HOME | cat", &[], &[], "echo", &["$HOME", "|", "cat"])]
    fn cmd_shapes(
        #[case] cmd: &str,
        #[case] args: &[&str],
        #[case] argv: &[&str],
        #[case] want_cmd: &str,
        #[case] want_args: &[&str],
    ) {
        let got = resolve_cmd_shape(cmd, &s(args), &s(argv));
        assert_eq!(got, Ok((want_cmd.to_string(), s(want_args))));
    }

    #[rstest]
    #[case("node", &[], &["python3"], "`argv` cannot be combined with `cmd` or `args`. Pick one shape. Got argv=[\"python3\"], cmd=\"node\", args=[]")]
    #[case("node -v", &["x"], &[], "cmd contains whitespace (shell-line shape) AND `args` is set; that is ambiguous.")]
    #[case("node 'oops", &[], &[], "cmd has unbalanced quotes and cannot be shlex-split: \"node 'oops\".")]
    #[case("   ", &[], &[], "cmd is empty after shlex split: \"   \"")]
    fn cmd_shape_errors(
        #[case] cmd: &str,
        #[case] args: &[&str],
        #[case] argv: &[&str],
        #[case] msg_prefix: &str,
    ) {
        let err = resolve_cmd_shape(cmd, &s(args), &s(argv)).expect_err("must be S001");
        assert_eq!(err.code(), SCode::S001);
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("invalid request: {msg_prefix}")),
            "{msg}"
        );
    }

    #[test]
    fn env_map_validates_names_list_does_not() {
        let mut m = BTreeMap::new();
        m.insert("1BAD".to_string(), "x".to_string());
        m.insert("GOOD".to_string(), "y".to_string());
        let err = EnvShape::Map(m).into_kv_vec().expect_err("S001");
        assert_eq!(
            err.to_string(),
            "invalid request: env contains invalid variable name(s): [\"1BAD\"]. Names must match `[A-Za-z_][A-Za-z0-9_]*`."
        );
        assert_eq!(
            EnvShape::List(s(&["1BAD=x"])).into_kv_vec(),
            Ok(s(&["1BAD=x"]))
        );
    }

    #[test]
    fn env_layers_defaults_create_exec() {
        let create = parse_kv(&s(&["A=1", "B=2", "PATH=/x", "junk"]));
        let exec = parse_kv(&s(&["B=3", "C=a=b"]));
        let env = layer_env(&create, &exec);
        let get = |k: &str| env.iter().find(|(ek, _)| ek == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("1"));
        assert_eq!(get("B"), Some("3"));
        assert_eq!(get("C"), Some("a=b"));
        assert_eq!(get("PATH"), Some("/x"));
        assert_eq!(get("HOME"), Some("/root"));
        assert_eq!(get("junk"), None);
    }

    #[rstest]
    #[case(None, Ok(vec![]))]
    #[case(Some(""), Ok(vec![]))]
    #[case(Some("aGkK"), Ok(b"hi\n".to_vec()))]
    fn stdin_decoding(#[case] input: Option<&str>, #[case] want: Result<Vec<u8>, DaemonError>) {
        assert_eq!(decode_stdin(input), want);
    }

    #[test]
    fn bad_stdin_is_s001() {
        let err = decode_stdin(Some("!!!")).expect_err("S001");
        assert_eq!(err.code(), SCode::S001);
        assert!(err
            .to_string()
            .starts_with("invalid request: stdin base64 decode: "));
    }
}
