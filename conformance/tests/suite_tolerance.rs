//! The harness tolerates a worker that differs from its profile, and a
//! draft profile can be read off a live worker.
//!
//! - A profile listing a function the worker does not publish: the run
//!   completes, and only the cases needing that function fail, saying so.
//! - `profile` (the draft) against this workspace's worker on the stand-in
//!   stack loads as a target and states every value of our hand-written
//!   profile: what it cannot see, seed 000 or docs/contract.md settles as
//!   we did.
//! - A new target without schema snapshots gets its `schema.*` cases
//!   skipped with the `--bless-schemas` instruction, not failed.

mod common;

use std::path::PathBuf;

use code_runner_conformance::suite::draft::KNOWN_FUNCTIONS;
use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::target::Target;
use code_runner_conformance::suite::{draft, run, Golden, Mode, SuiteOptions};

/// A golden copy whose `ghost` target is ours plus a function `ghost-fn`
/// the worker does not publish, and one case that needs it.
fn ghost_golden() -> PathBuf {
    let real = Golden::locate(None).unwrap();
    let dir = std::env::temp_dir().join(format!("suite-ghost-{:08x}", rand::random::<u32>()));
    common::copy_dir(&real.root, &dir);
    let target = std::fs::read_to_string(dir.join("targets/sandbox-code-runner.yaml"))
        .unwrap()
        .replace("name: sandbox-code-runner", "name: ghost")
        .replace(
            "functions: [run, register_function, teardown,",
            "functions: [ghost-fn, run, register_function, teardown,",
        );
    assert!(target.contains("ghost-fn"), "the profile lists the ghost");
    std::fs::write(dir.join("targets/ghost.yaml"), target).unwrap();
    common::copy_dir(
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
async fn a_draft_profile_of_our_worker_states_every_value_of_our_profile() {
    let (bench, mut w) = common::stack_with_our_worker("tolerance-test").await;
    let text = draft::draft(&bench.url(), "sandbox-code-runner", Some("draft"), None)
        .await
        .expect("the draft is written");
    w.stop().await;
    bench.shutdown().await;
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
    let ours = Target::load(
        &Golden::locate(None).unwrap().targets(),
        "sandbox-code-runner",
    )
    .expect("our target");
    assert_eq!(t.functions, ours.functions);
    let differing: Vec<String> = ours
        .profile
        .iter()
        .filter(|(k, f)| t.profile.get(*k).map(|d| &d.value) != Some(&f.value))
        .map(|(k, f)| {
            format!(
                "{k}: ours {}, drafted {:?}",
                f.value,
                t.profile.get(k).map(|d| (&d.value, &d.source))
            )
        })
        .collect();
    assert!(differing.is_empty(), "{}\n{text}", differing.join("\n"));
    // Where each value comes from is said.
    let source = |k: &str| t.profile[k].source.clone();
    for k in [
        "error_envelope",
        "stream_cap_bytes",
        "handler_checked_at_registration",
        "guest_listener",
        "guest_tenancy",
        "list_runtimes",
        "code_max_bytes",
        "functions_per_runtime_max",
        "list_runtimes_functions_field",
        "list_runtimes_shape",
        "run_response_exact",
        "guest_sdk_private",
        "inject_guidance_function",
        "op_stats",
    ] {
        assert!(source(k).starts_with("observed:"), "{k}: {}", source(k));
    }
    assert!(source("network").starts_with("seed 000 default"));
    assert!(source("file_config").starts_with("seed 000 default"));
    assert!(source("unknown_config_keys_refused").starts_with("suite contract default"));
    // The schemas travel along, as comments.
    assert!(text.contains("# run request_schema:"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_target_without_schema_snapshots_skips_them_with_the_bless_instruction() {
    let (bench, mut w) = common::stack_with_our_worker("tolerance-test").await;
    let real = Golden::locate(None).unwrap();
    let dir = std::env::temp_dir().join(format!("suite-fresh-{:08x}", rand::random::<u32>()));
    common::copy_dir(&real.root, &dir);
    let _ = std::fs::remove_dir_all(dir.join("schemas/fresh"));
    let target = std::fs::read_to_string(dir.join("targets/sandbox-code-runner.yaml"))
        .unwrap()
        .replace("name: sandbox-code-runner", "name: fresh");
    std::fs::write(dir.join("targets/fresh.yaml"), target).unwrap();
    std::fs::copy(
        dir.join("errors/sandbox-code-runner.json"),
        dir.join("errors/fresh.json"),
    )
    .unwrap();
    let mut options = SuiteOptions::new("fresh", Mode::Live { url: bench.url() });
    options.golden = Some(dir.clone());
    options.prefix = Some("sandbox-code-runner".into());
    options.filters = vec!["schema.*".into()];
    let report = run(options).await.expect("the run completes");
    eprint!("{}", report.summary_text());
    w.stop().await;
    bench.shutdown().await;
    let schemas: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.id.starts_with("schema."))
        .collect();
    let fresh = Target::load(&dir.join("targets"), "fresh").expect("the fresh target");
    assert_eq!(schemas.len(), fresh.functions.len(), "{schemas:?}");
    for c in schemas {
        assert_eq!(c.verdict, Verdict::Skip, "{}: {:?}", c.id, c.message);
        let why = c.reason.as_deref().unwrap_or("");
        assert!(
            why.contains("--bless-schemas") && why.contains("fresh"),
            "{why}"
        );
    }
    assert_eq!(report.summary.unexpected, 0, "{:?}", report.summary);
    let _ = std::fs::remove_dir_all(dir);
}
