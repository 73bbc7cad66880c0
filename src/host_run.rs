//! Test support: guest-side scripts run on this host as a VM runs them
//! (root starts them, some drop to the guest user), for the session's and
//! the scope servers' tests.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sandbox::{ExecOutput, ExecParams};

/// Reports a test skipped, with why; where CI asks for the root-only tests
/// (`SCR_REQUIRE_ROOT_TESTS=1`, set by `.ci/run` as root), fails instead.
pub(crate) fn skipped(why: &str) {
    let required = std::env::var("SCR_REQUIRE_ROOT_TESTS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "SCR_REQUIRE_ROOT_TESTS=1, but this test would skip: {why}"
    );
    eprintln!("skipped: {why}");
}

/// `e` run here (cwd /tmp, `env` added to its own), its stdin written
/// whole: what it printed and its exit status, once it and everything it
/// left in its process group (a relay's or a turn's background shells,
/// not what they started in sessions of their own) are done, so nothing
/// of it outlives the call.
pub(crate) fn exec_here(e: &ExecParams, env: &[(&str, String)]) -> ExecOutput {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(&e.argv[0])
        .args(&e.argv[1..])
        .envs(&e.env)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .current_dir("/tmp")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let group = child.id();
    let stdin = e.stdin.clone().unwrap_or_default();
    let mut pipe = child.stdin.take().expect("stdin piped");
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&stdin);
    });
    let done = child.wait_with_output().expect("sh ends");
    writer.join().expect("the writer ends");
    assert!(
        wait_until(Duration::from_secs(30), || !group_runs(group)),
        "what the exec left in its group ends"
    );
    ExecOutput {
        stdout: String::from_utf8_lossy(&done.stdout).into(),
        stderr: String::from_utf8_lossy(&done.stderr).into(),
        exit_code: done.status.code(),
        duration_ms: 0,
    }
}

/// Whether a process of group `pgid` runs (a zombie does not: an
/// orphan's may wait a while for whoever adopted it to reap it).
fn group_runs(pgid: u32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        // After the command's `)`: state, ppid, pgrp, …
        let mut rest = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace();
        let state = rest.next();
        let pgrp = rest.nth(1);
        state.is_some_and(|s| s != "Z") && pgrp == Some(pgid.to_string().as_str())
    })
}

/// Whether `cond` holds before `within` passes, looked at every 10 ms
/// (the files and processes these tests wait on send no event).
pub(crate) fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Ends the session (process group) of the process a pid file names (never
/// `kill -1`: anything but a pid above 1 is skipped).
pub(crate) fn end_session(pid_file: &str) {
    if let Some(pid) = pid_file.trim().parse::<u32>().ok().filter(|p| *p > 1) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
    }
}
