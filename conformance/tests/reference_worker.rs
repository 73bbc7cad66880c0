//! The suite, run hermetically against a worker it was not written against:
//! `fixtures/reference-worker/` (Python, on the PyPI `iii-sdk`), in its
//! seed-000 mode (target `reference`) and its code-runner mode (target
//! `code-runner-reference`).
//!
//! Asserted for each mode:
//! - every `contract` case passes, or is skipped by a profile value;
//! - the failures are exactly the cases its expectations file lists, and
//!   every one of those is a `recommended` (or `profile`) case;
//! - nothing else is unexpected: no stale expectation, no closed-world
//!   violation, no failure coming from the harness or the double (those
//!   would be unlisted failures).
//!
//! The worker runs on the venv `<target>/sdk-cache/python` (the one
//! `sdk_clients.rs` builds); node runtimes get the npm SDK bundle that
//! `build.rs` leaves in `<target>/guest-npm/`.

mod common;

use std::path::PathBuf;

use code_runner_conformance::suite::case::Level;
use code_runner_conformance::suite::env::WorkerCommand;
use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::report::Report;
use code_runner_conformance::suite::{run, Mode, SuiteOptions};
use common::sdk_cache::{python_venv, target_dir, workspace_root};

fn worker_script() -> PathBuf {
    workspace_root().join("fixtures/reference-worker/reference_worker.py")
}

/// The npm iii-sdk as one ES module, as `build.rs` caches it.
fn node_bundle() -> Option<PathBuf> {
    std::fs::read_dir(target_dir().join("guest-npm"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("iii-sdk.mjs"))
        .find(|p| p.is_file())
}

/// Runs the cases matching `filters` (all when empty) with `jobs` at once.
async fn run_against_reference(
    target: &str,
    extra: &[&str],
    filters: &[&str],
    jobs: usize,
) -> Report {
    let venv = python_venv().await;
    let mut cmd = WorkerCommand::program(venv.join("bin/python"));
    cmd.args.push("-u".into());
    cmd.args.push(worker_script().display().to_string());
    cmd.args.push("--wheel-dir".into());
    cmd.args.push(
        target_dir()
            .join("sdk-cache/reference-wheels")
            .display()
            .to_string(),
    );
    cmd.args.extend(extra.iter().map(|a| a.to_string()));
    let mut options = SuiteOptions::new(
        target,
        Mode::Hermetic {
            worker_cmd: Some(cmd),
        },
    );
    options.jobs = jobs;
    options.filters = filters.iter().map(|f| f.to_string()).collect();
    options.progress = false;
    let report = run(options).await.expect("the suite runs");
    eprint!("{}", report.summary_text());
    report
}

/// The assertions shared by both modes.
fn assert_only_listed_recommended_failures(report: &Report) {
    let unexpected = report.unexpected_lines();
    assert!(
        unexpected.is_empty(),
        "unexpected results against the reference worker:\n{}",
        unexpected.join("\n\n")
    );
    assert!(report.closed_world.is_empty(), "{:?}", report.closed_world);
    for c in &report.cases {
        if c.level == Some(Level::Contract) {
            assert!(
                matches!(c.verdict, Verdict::Pass | Verdict::Skip),
                "contract case {} is {}: {:?}",
                c.id,
                c.verdict.label(),
                c.message
            );
        }
        if c.verdict == Verdict::ExpectedFail {
            assert_ne!(
                c.level,
                Some(Level::Contract),
                "{} is a contract case: it may not be an expected failure",
                c.id
            );
        }
    }
    assert!(report.summary.passed > 0, "{:?}", report.summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_mode_fails_only_its_listed_recommended_cases() {
    let bundle = node_bundle().map(|p| p.display().to_string());
    let extra: Vec<&str> = match &bundle {
        Some(b) => vec!["--node-sdk-bundle", b],
        None => {
            eprintln!("note: no npm SDK bundle under <target>/guest-npm (build.rs makes it): node runtimes get no iii");
            vec![]
        }
    };
    let report = run_against_reference("reference", &extra, &[], 4).await;
    assert_only_listed_recommended_failures(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_runner_mode_fails_only_its_listed_recommended_cases() {
    let report = run_against_reference("code-runner-reference", &["--code-runner"], &[], 4).await;
    assert_only_listed_recommended_failures(&report);
    for id in [
        "run.result.python-null",
        "run.result-cap.python",
        "run.keep.globals-persist",
        "register.reregister-replaces",
    ] {
        let case = report.cases.iter().find(|c| c.id == id);
        assert!(
            case.is_some_and(|c| c.verdict == Verdict::Pass),
            "{id} must run and pass in code-runner mode: {:?}",
            case.map(|c| (c.verdict, &c.message, &c.reason))
        );
    }
}
