//! The whole suite with a real iii engine binary as every environment's
//! engine (`run --engine-bin`), private environments included: 0 unexpected
//! results, and no case skipped for want of a private environment.
//!
//! Gated on `III_BIN` (the path of an iii engine binary, e.g. 0.23.0-rc.4
//! built from its public source); without it the test says why it skips.

use code_runner_conformance::suite::env::WorkerCommand;
use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::{run, Mode, SuiteOptions};

fn worker() -> WorkerCommand {
    WorkerCommand::default_beside_exe().expect("the worker binary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_runs_on_a_real_engine_binary() {
    let Some(bin) = std::env::var_os("III_BIN") else {
        eprintln!(
            "skipped: III_BIN is not set — point it at a real iii engine binary to run every case on it"
        );
        return;
    };
    let mut options = SuiteOptions::new(
        "sandbox-code-runner",
        Mode::EngineBin {
            bin: bin.into(),
            worker_cmd: Some(worker()),
        },
    );
    options.jobs = 4;
    let report = run(options).await.expect("the suite runs");
    eprint!("{}", report.summary_text());
    let unexpected = report.unexpected_lines();
    assert!(
        unexpected.is_empty(),
        "unexpected results:\n{}",
        unexpected.join("\n")
    );
    let private_skips: Vec<&str> = report
        .cases
        .iter()
        .filter(|c| c.verdict == Verdict::Skip)
        .filter(|c| {
            c.reason
                .as_deref()
                .unwrap_or("")
                .contains("private environment")
        })
        .map(|c| c.id.as_str())
        .collect();
    assert!(
        private_skips.is_empty(),
        "skipped for want of a private environment: {private_skips:?}"
    );
}
