//! The whole conformance suite, hermetically, against this workspace's
//! worker: the bench in-process, `sandbox-code-runner` spawned. Any
//! unexpected result (a failure, a stale expectation, a closed-world
//! violation) fails the test. The live schemas are insta snapshots too.

mod common;

use code_runner_conformance::suite::Mode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_suite_passes_against_our_worker() {
    let report = common::whole_suite_without_surprises(Mode::Hermetic {
        worker_cmd: Some(common::our_worker()),
    })
    .await;
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
