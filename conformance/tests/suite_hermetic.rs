//! The whole conformance suite, hermetically, against this workspace's
//! worker: the bench in-process, `sandbox-code-runner` spawned. Any
//! unexpected result (a failure, a stale expectation, a closed-world
//! violation) fails the test. The live schemas are insta snapshots too.

use code_runner_conformance::suite::env::WorkerCommand;
use code_runner_conformance::suite::{run, Mode, SuiteOptions};

fn worker() -> WorkerCommand {
    WorkerCommand::default_beside_exe().expect("the worker binary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_suite_passes_against_our_worker() {
    let mut options = SuiteOptions::new(
        "sandbox-code-runner",
        Mode::Hermetic {
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
    assert!(report.closed_world.is_empty(), "{:?}", report.closed_world);
    assert!(report.summary.passed >= 100, "{:?}", report.summary);
    assert_eq!(
        report
            .envelopes
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["code_field"],
        "our worker uses the code-field envelope only"
    );
    for (function, schema) in &report.schemas {
        insta::assert_json_snapshot!(format!("live__sandbox-code-runner__{function}"), schema);
    }
}
