//! The whole suite with a real iii engine binary as every environment's
//! engine (`run --engine-bin`), private environments included: 0 unexpected
//! results, and no case skipped for want of a private environment.
//!
//! Gated on `III_BIN` (the path of an iii engine binary, e.g. 0.23.0-rc.4
//! built from its public source); without it the test says why it skips.

mod common;

use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::Mode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_runs_on_a_real_engine_binary() {
    let Some(bin) = std::env::var_os("III_BIN") else {
        eprintln!(
            "skipped: III_BIN is not set — point it at a real iii engine binary to run every case on it"
        );
        return;
    };
    let report = common::whole_suite_without_surprises(Mode::EngineBin {
        bin: bin.into(),
        worker_cmd: Some(common::our_worker()),
    })
    .await;
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
