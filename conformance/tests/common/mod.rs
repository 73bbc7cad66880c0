//! Helpers shared by the conformance crate's integration tests.
#![allow(dead_code, unused_imports)]

pub mod real_engine;
pub mod sdk_cache;

use code_runner_conformance::standin::stack::{Stack, StackOptions};
use code_runner_conformance::suite::case::UrlVia;
use code_runner_conformance::suite::draft::KNOWN_FUNCTIONS;
use code_runner_conformance::suite::env::{suite_limits, WorkerCommand, WorkerProcess};
use code_runner_conformance::suite::report::Report;
use code_runner_conformance::suite::{run, Mode, SuiteOptions};
use iii_sdk::IIIClient;

/// Connects a Rust SDK client with an explicit, unique worker name: two
/// clients in one process would otherwise share `host:pid` and the engine
/// would reject the second one.
pub async fn client(url: &str, name: &str) -> IIIClient {
    code_runner_conformance::standin::client::connect_named(url, name)
        .await
        .expect("client registers with the engine")
}

pub use code_runner_conformance::standin::wait::until as wait_for;

/// A stand-in stack with this workspace's worker connected and every one
/// of its functions published; `probe` names the client that waited.
pub async fn stack_with_our_worker(probe: &str) -> (Stack, WorkerProcess) {
    let bench = Stack::start(StackOptions {
        port: 0,
        engine: None,
        limits: suite_limits(),
        ..StackOptions::default()
    })
    .await
    .expect("bench starts");
    let url = bench.url();
    let probe = code_runner_conformance::standin::client::connect(&url, probe)
        .await
        .expect("client connects");
    let mut w =
        WorkerProcess::spawn(&our_worker(), &url, UrlVia::Flag, None).expect("worker starts");
    let ids: Vec<String> = KNOWN_FUNCTIONS
        .iter()
        .map(|f| format!("sandbox-code-runner::{f}"))
        .collect();
    w.wait_ready(&probe, &ids).await.expect("worker ready");
    probe.shutdown_async().await;
    (bench, w)
}

/// This workspace's worker, as the suite spawns it.
pub fn our_worker() -> WorkerCommand {
    WorkerCommand::default_beside_exe().expect("the worker binary")
}

/// Every case for our target in `mode` (4 jobs): prints the summary and
/// fails on any unexpected result.
pub async fn whole_suite_without_surprises(mode: Mode) -> Report {
    let mut options = SuiteOptions::new("sandbox-code-runner", mode);
    options.jobs = 4;
    let report = run(options).await.expect("the suite runs");
    eprint!("{}", report.summary_text());
    let unexpected = report.unexpected_lines();
    assert!(
        unexpected.is_empty(),
        "unexpected results:\n{}",
        unexpected.join("\n")
    );
    report
}

/// Copies the tree `from` into `to` (a private golden copy a test edits).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}
