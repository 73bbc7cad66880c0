//! The guest wrappers' own test suites (guest/tests), run with the host's
//! node and python3: frames, exit codes, tracebacks, forged frames, and the
//! live `iii` global against a stand-in engine.

use std::path::Path;
use std::time::Duration;

use code_runner_conformance::standin::engine::StandInEngine;

const DEADLINE: Duration = Duration::from_secs(240);

async fn run(mut cmd: tokio::process::Command, what: &str) {
    let out = tokio::time::timeout(DEADLINE, cmd.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} finished within {DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("{what} starts: {e}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    let tail: Vec<&str> = text.lines().rev().take(12).collect();
    eprintln!("{what}:");
    for line in tail.iter().rev() {
        eprintln!("{line}");
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_wrappers_including_live_iii() {
    // The bundle under target/guest-npm exists: this test binary's crate
    // embedded it at build time.
    let engine = StandInEngine::start(0).await.expect("engine");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg("--test")
        .arg("guest/tests/")
        .current_dir(root())
        .env("SCR_TEST_III_URL", engine.url());
    run(cmd, "node --test guest/tests/").await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_wrappers_on_debian_python_including_live_iii() {
    let engine = StandInEngine::start(0).await.expect("engine");
    let mut cmd = tokio::process::Command::new("python3");
    cmd.args(["-m", "unittest", "discover", "-s", "guest/tests"])
        .current_dir(root())
        .env("SCR_TEST_PYTHON", "/usr/bin/python3")
        .env("SCR_TEST_III_URL", engine.url());
    run(cmd, "python3 -m unittest discover -s guest/tests").await;
    engine.shutdown().await;
}
