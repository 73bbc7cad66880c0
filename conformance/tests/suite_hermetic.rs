//! The whole conformance suite, hermetically, against this workspace's
//! worker: the bench in-process, `sandbox-code-runner` spawned. Any
//! unexpected result (a failure, a stale expectation, a closed-world
//! violation) fails the test. The live schemas are insta snapshots too. A
//! case the stand-ins cannot model on this host (no slirp4netns) is
//! skipped with the fix.

mod common;

use code_runner_conformance::suite::expectations::Verdict;
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
    // A case the stand-ins cannot model here is skipped with the fix, never
    // failed; where they can, it runs.
    let unreachable = report
        .cases
        .iter()
        .find(|c| c.id == "guest.main-listener-unreachable")
        .expect("guest.main-listener-unreachable");
    match code_runner_conformance::standin::sandbox_double::network::unmodelled() {
        Some(_) => {
            assert_eq!(unreachable.verdict, Verdict::Skip, "{unreachable:?}");
            let why = unreachable.reason.as_deref().unwrap_or("");
            assert!(why.contains("apt-get install slirp4netns"), "{why}");
        }
        None => assert_eq!(unreachable.verdict, Verdict::Pass, "{unreachable:?}"),
    }
    for (function, schema) in &report.schemas {
        insta::assert_json_snapshot!(format!("live__sandbox-code-runner__{function}"), schema);
    }
}
