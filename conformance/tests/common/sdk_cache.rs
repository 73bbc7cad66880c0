//! The SDK caches under `<target>/sdk-cache/` that tests share (see
//! `sdk_clients.rs` for what they hold and when they are rebuilt), and the
//! process helpers that build them.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// How long one SDK install may take (cold `npm ci` or `pip install`).
pub const INSTALL_DEADLINE: Duration = Duration::from_secs(600);

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the conformance crate sits in the workspace")
        .to_path_buf()
}

pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

pub fn cache_root() -> PathBuf {
    target_dir().join("sdk-cache")
}

pub fn sdk_sources(which: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("sdk")
        .join(which)
}

/// FNV-1a (64 bit) over length-prefixed parts: a stable content hash
/// without a dependency.
pub fn content_hash(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for part in parts {
        feed(&(part.len() as u64).to_le_bytes());
        feed(part);
    }
    format!("{h:016x}")
}

/// An exclusive `flock` on `path`, released when the file is dropped. Taken
/// on a blocking thread: another process may hold it through a whole install.
pub async fn exclusive_lock(path: PathBuf) -> std::fs::File {
    let what = path.display().to_string();
    let locking = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(file)
    });
    match tokio::time::timeout(INSTALL_DEADLINE + Duration::from_secs(60), locking).await {
        Ok(Ok(Ok(file))) => file,
        Ok(Ok(Err(e))) => panic!("cannot lock {what}: {e}"),
        Ok(Err(e)) => panic!("locking {what}: {e}"),
        Err(_) => panic!("{what} stayed locked by another process for too long"),
    }
}

pub fn shown(out: &Output) -> String {
    format!(
        "--- stdout ---\n{}--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd` to completion with its output captured, killing it at
/// `deadline`.
pub async fn run(
    mut cmd: tokio::process::Command,
    deadline: Duration,
    what: &str,
) -> Result<Output, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    match tokio::time::timeout(deadline, child.wait_with_output()).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        // Dropping the wait drops the child, which kills it.
        Err(_) => Err(format!("{what}: still running after {deadline:?}, killed")),
    }
}

/// Runs `cmd` and returns its stdout, panicking with its output unless it
/// exits 0.
pub async fn run_ok(cmd: tokio::process::Command, deadline: Duration, what: &str) -> String {
    let out = run(cmd, deadline, what)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if !out.status.success() {
        panic!("{what} failed ({}):\n{}", out.status, shown(&out));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn command(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    // The scripts get the engine address as an argument; nothing ambient
    // may steer the SDKs elsewhere or rename their workers.
    for var in ["III_URL", "III_WORKER_NAME", "III_NAMESPACE", "III_TOKEN"] {
        cmd.env_remove(var);
    }
    cmd
}

pub fn write_stamp(dir: &Path, stamp: &str) {
    let tmp = dir.join(".stamp.tmp");
    std::fs::write(&tmp, stamp).expect("write the stamp");
    std::fs::rename(&tmp, dir.join(".stamp")).expect("commit the stamp");
}

pub fn stamp_matches(dir: &Path, stamp: &str, sentinel: &Path) -> bool {
    sentinel.exists() && std::fs::read_to_string(dir.join(".stamp")).is_ok_and(|s| s == stamp)
}

pub fn fresh_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot clear {}: {e}", dir.display()),
    }
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
}

/// Builds the venv `<target>/sdk-cache/python` with the PyPI SDK unless
/// the stamp says the one there is current.
pub async fn python_venv() -> PathBuf {
    let dir = cache_root().join("python");
    let _lock = exclusive_lock(cache_root().join("python.lock")).await;
    let requirements = std::fs::read(sdk_sources("python").join("requirements.txt"))
        .expect("tests/sdk/python/requirements.txt");
    let mut probe = command("python3");
    probe.args([
        "-c",
        "import sys; print(sys.version); print(sys.executable)",
    ]);
    let interpreter = run_ok(probe, Duration::from_secs(30), "python3 --version").await;
    let hash = content_hash(&[&requirements, interpreter.as_bytes()]);
    let stamp = format!("{hash}\n");
    let python = dir.join("bin").join("python");
    let sentinel = python.clone();
    if stamp_matches(&dir, &stamp, &sentinel) {
        eprintln!("python SDK cache {}: current (stamp {hash})", dir.display());
        return dir;
    }
    let started = Instant::now();
    fresh_dir(&dir);
    let mut venv = command("python3");
    venv.args(["-m", "venv"]).arg(&dir);
    run_ok(venv, INSTALL_DEADLINE, "python3 -m venv").await;
    let mut pip = command(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ])
    .arg(sdk_sources("python").join("requirements.txt"));
    run_ok(pip, INSTALL_DEADLINE, "installing the PyPI iii-sdk").await;
    write_stamp(&dir, &stamp);
    eprintln!(
        "python SDK cache {}: installed in {:.1} s (stamp {hash})",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    dir
}
