//! The harness tolerates a worker that differs from its profile, and a
//! draft profile can be read off a live worker.
//!
//! - A profile listing a function the worker does not publish: the run
//!   completes, and only the cases needing that function fail, saying so.
//! - `profile` (the draft) against this workspace's worker on the bench
//!   loads as a target and states what the worker shows.

mod common;

use std::path::{Path, PathBuf};

use code_runner_conformance::suite::draft::KNOWN_FUNCTIONS;
use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::target::Target;
use code_runner_conformance::suite::{draft, run, Golden, Mode, SuiteOptions};

fn copy_dir(from: &Path, to: &Path) {
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

/// A golden copy whose `ghost` target is ours plus a function `ghost-fn`
/// the worker does not publish, and one case that needs it.
fn ghost_golden() -> PathBuf {
    let real = Golden::locate(None).unwrap();
    let dir = std::env::temp_dir().join(format!("suite-ghost-{:08x}", rand::random::<u32>()));
    copy_dir(&real.root, &dir);
    let target = std::fs::read_to_string(dir.join("targets/sandbox-code-runner.yaml"))
        .unwrap()
        .replace("name: sandbox-code-runner", "name: ghost")
        .replace(
            "functions: [run, register_function, teardown,",
            "functions: [ghost-fn, run, register_function, teardown,",
        );
    assert!(target.contains("ghost-fn"), "the profile lists the ghost");
    std::fs::write(dir.join("targets/ghost.yaml"), target).unwrap();
    copy_dir(
        &dir.join("schemas/sandbox-code-runner"),
        &dir.join("schemas/ghost"),
    );
    let table = std::fs::read_to_string(dir.join("errors/sandbox-code-runner.json")).unwrap();
    std::fs::write(dir.join("errors/ghost.json"), table).unwrap();
    std::fs::write(
        dir.join("expectations/ghost.yaml"),
        "target: ghost\nexpected_failures: []\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("cases/ghost.needs-it.yaml"),
        "id: ghost.needs-it\nsince: 0.1.0\nlevel: recommended\nsummary: needs the ghost function.\nsteps:\n  - trigger: ghost-fn\n    payload: {}\n",
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_the_worker_does_not_publish_fails_only_the_cases_needing_it() {
    let (bench, mut w) = common::stack_with_our_worker("tolerance-test").await;
    let golden = ghost_golden();
    let mut options = SuiteOptions::new("ghost", Mode::Live { url: bench.url() });
    options.golden = Some(golden.clone());
    options.prefix = Some("sandbox-code-runner".into());
    options.filters = vec![
        "ghost.needs-it".into(),
        "schema.ghost-fn".into(),
        "run.one-shot.print".into(),
        "teardown.exactly-one".into(),
        "run.validation.bad-lang".into(),
        "schema.teardown".into(),
    ];
    let report = run(options).await.expect("the run completes");
    eprint!("{}", report.summary_text());
    let case = |id: &str| {
        report
            .cases
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    for id in ["ghost.needs-it", "schema.ghost-fn"] {
        let c = case(id);
        assert_eq!(c.verdict, Verdict::Fail, "{id}");
        let m = c.message.as_deref().unwrap_or("");
        assert!(
            m.contains("sandbox-code-runner::ghost-fn") && m.contains("does not publish"),
            "{id}: {m}"
        );
    }
    for id in [
        "run.one-shot.print",
        "teardown.exactly-one",
        "run.validation.bad-lang",
        "schema.teardown",
    ] {
        assert_eq!(
            case(id).verdict,
            Verdict::Pass,
            "{id}: {:?}",
            case(id).message
        );
    }
    assert_eq!(report.summary.unexpected, 2, "{:?}", report.summary);
    w.stop().await;
    bench.shutdown().await;
    let _ = std::fs::remove_dir_all(golden);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_profile_of_a_live_worker_loads_and_states_what_it_shows() {
    let (bench, mut w) = common::stack_with_our_worker("tolerance-test").await;
    let text = draft::draft(&bench.url(), "sandbox-code-runner", Some("draft"), None)
        .await
        .expect("the draft is written");
    let t: Target = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(t.name, "draft");
    assert_eq!(t.prefix, "sandbox-code-runner");
    for f in KNOWN_FUNCTIONS {
        assert!(
            t.functions.iter().any(|x| x == f),
            "{f} in {:?}",
            t.functions
        );
    }
    let value = |k: &str| t.profile.get(k).map(|f| f.value.clone());
    assert_eq!(
        value("error_envelope"),
        Some(serde_json::json!("code_field"))
    );
    assert_eq!(value("langs"), Some(serde_json::json!(["node", "python"])));
    assert_eq!(value("keep"), Some(serde_json::json!(true)));
    assert_eq!(value("run_result_field"), Some(serde_json::json!(false)));
    assert!(t.profile["error_envelope"].source.starts_with("observed:"));
    // Unobservable values are the seed's, and say so.
    assert_eq!(value("network"), Some(serde_json::json!(true)));
    assert!(t.profile["network"]
        .source
        .contains("seed 000 default (not observable"));
    // Values the seeds leave open are offered commented out.
    assert!(value("code_max_bytes").is_none());
    assert!(text.contains("# code_max_bytes:"), "{text}");
    // The schemas travel along, as comments.
    assert!(text.contains("# run request_schema:"), "{text}");
    w.stop().await;
    bench.shutdown().await;
}
