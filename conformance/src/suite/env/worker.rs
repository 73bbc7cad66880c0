//! The one worker-process type: spawning a worker command (with its config,
//! log and URL), waiting until it publishes, SIGTERM with a kill deadline,
//! crash and respawn. The suite, `tests/common` and `benches/support` use it.

use super::*;

/// The worker command line (`--worker-cmd`), without `--url`/`--config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    pub(crate) program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// Splits a shell-like command line.
    pub fn parse(line: &str) -> Result<WorkerCommand, EnvError> {
        let parts = shlex::split(line)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| EnvError::Failed(format!("cannot split --worker-cmd `{line}`")))?;
        Ok(WorkerCommand {
            program: PathBuf::from(&parts[0]),
            args: parts[1..].to_vec(),
        })
    }

    pub fn program(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// Runs the command once with `args` appended (a subcommand that prints
    /// and exits, such as `guest-listener-config`) and collects its output.
    pub fn output<I, S>(&self, args: I) -> std::io::Result<std::process::Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        std::process::Command::new(&self.program)
            .args(&self.args)
            .args(args)
            .stdin(Stdio::null())
            .output()
    }

    /// The workspace's `sandbox-code-runner`: `$SANDBOX_CODE_RUNNER_BIN`
    /// when set, else the one next to the running executable
    /// (`target/<profile>/`), built with cargo when it is missing.
    pub fn default_beside_exe() -> Result<WorkerCommand, EnvError> {
        match std::env::var_os("SANDBOX_CODE_RUNNER_BIN") {
            Some(p) => Ok(WorkerCommand::program(p)),
            None => WorkerCommand::beside_exe(BuildPolicy::IfMissing),
        }
    }

    /// The same, with a choice of when to run `cargo build` first.
    pub(crate) fn beside_exe(policy: BuildPolicy) -> Result<WorkerCommand, EnvError> {
        let exe = std::env::current_exe()
            .map_err(|e| EnvError::caused("cannot locate the current executable", e))?;
        let mut dir = exe
            .parent()
            .ok_or_else(|| EnvError::Failed("the executable has no directory".into()))?
            .to_path_buf();
        // Test binaries live one level down, in target/<profile>/deps.
        if dir.file_name().and_then(|n| n.to_str()) == Some("deps") {
            dir.pop();
        }
        let candidate = dir.join("sandbox-code-runner");
        if policy == BuildPolicy::Always || !candidate.exists() {
            build_worker(&dir)?;
        }
        if !candidate.exists() {
            return Err(EnvError::Failed(format!(
                "no worker at {}; build it (`cargo build -p sandbox-code-runner`) or pass --worker-cmd",
                candidate.display()
            )));
        }
        Ok(WorkerCommand::program(candidate))
    }
}

/// When the default worker is (re)built before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildPolicy {
    /// Only when the binary is missing (tests: cargo built it already).
    IfMissing,
    /// Every time (the CLI: a run always tests the current sources; a no-op
    /// when they are built already).
    Always,
}

/// `cargo build -p sandbox-code-runner` for the profile whose output
/// directory is `dir` (`…/target/debug` or `…/target/release`).
pub(super) fn build_worker(dir: &Path) -> Result<(), EnvError> {
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let Some(target_dir) = dir.parent() else {
        return Ok(());
    };
    let manifest = target_dir.parent().map(|w| w.join("Cargo.toml"));
    let Some(manifest) = manifest.filter(|m| m.exists()) else {
        return Ok(());
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building the worker: cargo build --profile {profile} -p sandbox-code-runner");
    let profile_arg = if profile == "debug" { "dev" } else { profile };
    let mut command = std::process::Command::new(&cargo);
    // `cargo run` hands its child the package's own CARGO_* variables; build
    // scripts that track them (ring's, through cc) would see a changed
    // environment, rerun, and make the next `cargo run` rebuild half the tree.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
            )
        {
            command.env_remove(key);
        }
    }
    let status = command
        .arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--profile")
        .arg(profile_arg)
        .arg("-p")
        .arg("sandbox-code-runner")
        .arg("--bin")
        .arg("sandbox-code-runner")
        .arg("--quiet")
        .arg("--target-dir")
        .arg(target_dir)
        .status();
    let status = match status {
        Ok(s) => s,
        // No cargo here: use whatever binary exists.
        Err(e) => {
            eprintln!("note: cannot run {cargo} ({e}); using the existing worker binary");
            return Ok(());
        }
    };
    if !status.success() {
        return Err(EnvError::Failed(format!(
            "cargo build -p sandbox-code-runner failed ({status})"
        )));
    }
    Ok(())
}

/// A worker process we started: the one way the suite, the worker's tests
/// and its benches spawn, SIGTERM and kill a worker.
pub struct WorkerProcess {
    cmd: WorkerCommand,
    url: String,
    guest_url: Option<String>,
    env: Vec<(String, String)>,
    url_via: UrlVia,
    config_path: Option<PathBuf>,
    pub(crate) log_path: PathBuf,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl WorkerProcess {
    /// Writes the config (if any) and starts the process.
    pub fn spawn(
        cmd: &WorkerCommand,
        url: &str,
        url_via: UrlVia,
        config: Option<&str>,
    ) -> Result<WorkerProcess, EnvError> {
        WorkerProcess::spawn_with_guest(cmd, url, url_via, config, None)
    }

    /// [`WorkerProcess::spawn`], telling the worker the engine's guest
    /// listener through `III_GUEST_URL` (an env var: a worker that knows no
    /// guest listener ignores it).
    pub(crate) fn spawn_with_guest(
        cmd: &WorkerCommand,
        url: &str,
        url_via: UrlVia,
        config: Option<&str>,
        guest_url: Option<String>,
    ) -> Result<WorkerProcess, EnvError> {
        WorkerProcess::spawn_with_env(cmd, url, url_via, config, guest_url, &[])
    }

    /// [`WorkerProcess::spawn_with_guest`] with extra environment variables
    /// (they win over the default `RUST_LOG`).
    pub fn spawn_with_env(
        cmd: &WorkerCommand,
        url: &str,
        url_via: UrlVia,
        config: Option<&str>,
        guest_url: Option<String>,
        env: &[(&str, &str)],
    ) -> Result<WorkerProcess, EnvError> {
        let dir = std::env::temp_dir().join(format!(
            "code-runner-conformance-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| EnvError::caused(format!("cannot create {}", dir.display()), e))?;
        let config_path = match config {
            Some(text) => {
                let p = dir.join("worker-config.yaml");
                std::fs::write(&p, text)
                    .map_err(|e| EnvError::caused(format!("cannot write {}", p.display()), e))?;
                Some(p)
            }
            None => None,
        };
        let mut w = WorkerProcess {
            cmd: cmd.clone(),
            url: url.to_string(),
            guest_url,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            url_via,
            config_path,
            log_path: dir.join("worker.log"),
            dir,
            child: None,
        };
        w.start()?;
        Ok(w)
    }

    fn start(&mut self) -> Result<(), EnvError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| EnvError::caused("cannot open the worker log", e))?;
        let mut c = tokio::process::Command::new(&self.cmd.program);
        c.args(&self.cmd.args);
        c.env_remove("III_URL");
        c.env_remove("III_GUEST_URL");
        if let Some(g) = &self.guest_url {
            c.env("III_GUEST_URL", g);
        }
        match self.url_via {
            UrlVia::Flag => {
                c.arg("--url").arg(&self.url);
            }
            UrlVia::Env => {
                c.env("III_URL", &self.url);
            }
            UrlVia::Default => {}
        }
        if let Some(p) = &self.config_path {
            c.arg("--config").arg(p);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            // Debug, so secrecy cases see everything the worker would log.
            c.env(
                "RUST_LOG",
                "debug,iii_sdk=info,tungstenite=info,tokio_tungstenite=info,opentelemetry=warn",
            );
        }
        c.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // stdout and stderr both count as the worker's log: workers differ in
        // which stream their logger writes to.
        let log_out = log
            .try_clone()
            .map_err(|e| EnvError::caused("cannot open the worker log", e))?;
        c.stdin(Stdio::null())
            .stdout(Stdio::from(log_out))
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let child = c.spawn().map_err(|e| {
            EnvError::caused(
                format!("cannot start the worker `{}`", self.cmd.program.display()),
                e,
            )
        })?;
        self.child = Some(child);
        Ok(())
    }

    /// The worker's stdout and stderr so far, interleaved as written.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Whether the process already ended (and how).
    pub(crate) fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until every id in `functions` is listed by the engine — or,
    /// for a worker that publishes only some of them, until that part has
    /// stayed the same for a moment (the cases needing the rest then fail
    /// on their own, with the reason).
    pub async fn wait_ready(
        &mut self,
        client: &IIIClient,
        functions: &[String],
    ) -> Result<(), EnvError> {
        let deadline = Deadline::after(READY_DEADLINE, Duration::from_millis(20));
        let mut last: Option<(Vec<String>, Instant)> = None;
        loop {
            if let Some(status) = self.try_exit() {
                return Err(EnvError::Failed(format!(
                    "the worker exited ({status}) before publishing its functions; log tail:\n{}",
                    self.log_tail()
                )));
            }
            if let Some(present) = functions_present(client, functions).await {
                if present.len() == functions.len() {
                    return Ok(());
                }
                match &last {
                    Some((seen, since)) if *seen == present => {
                        if !present.is_empty() && since.elapsed() >= SETTLE {
                            return Ok(());
                        }
                    }
                    _ => last = Some((present, Instant::now())),
                }
            }
            if !deadline.tick().await {
                return Err(EnvError::Failed(format!(
                    "the worker did not publish {} within {:?}; log tail:\n{}",
                    functions.join(", "),
                    READY_DEADLINE,
                    self.log_tail()
                )));
            }
        }
    }

    /// SIGTERM, then wait (killing it after a deadline).
    pub async fn stop(&mut self) -> Option<ExitStatus> {
        crate::suite::child::stop(self.child.take()?, STOP_DEADLINE).await
    }

    /// Sends SIGTERM and returns at once (a supervisor's stop request);
    /// [`WorkerProcess::wait_exit`] then bounds how long it may take.
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            crate::suite::child::sigterm(child);
        }
    }

    /// Waits for the process to end by itself.
    pub async fn wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = tokio::time::timeout(deadline, child.wait())
            .await
            .ok()?
            .ok()?;
        self.child = None;
        Some(status)
    }

    /// Starts the same command again.
    pub fn respawn(&mut self) -> Result<(), EnvError> {
        self.start()
    }

    /// Whether a process of ours is running (not stopped, killed or exited
    /// through [`WorkerProcess::wait_exit`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(tokio::process::Child::id)
    }

    /// Kills the process without letting it clean up (a crash).
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
