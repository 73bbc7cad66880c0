//! A step that misses its time bound says where the time went, as far as
//! the harness can see: hermetically, the `sandbox::*` calls the daemon
//! double served meanwhile (a create, an exec with its command and exit
//! code, a stop), each with its offset and duration; against a live
//! engine, that the harness has no double to ask.

mod common;

use std::path::{Path, PathBuf};

use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::report::Report;
use code_runner_conformance::suite::{run, Golden, Mode, SuiteOptions};

/// The step both cases time: a python run that sleeps 1.5 s, bound to 300 ms.
const SLOW_STEP: &str = "steps:
  - trigger: run
    payload: {lang: python, code: \"import time\\ntime.sleep(1.5)\\nprint('slept')\", timeout_ms: 10000}
    expect: {response: {stdout: \"slept\\n\"}}
    within_ms: 300
";

/// The repository's golden data plus two cases whose step misses its
/// bound: `timing.private` in an environment of its own (no warm pool, so
/// the run's VM is created during the step), `timing.shared` without one.
fn golden_with_slow_cases() -> PathBuf {
    let real = Golden::locate(None).unwrap();
    let dir = std::env::temp_dir().join(format!("suite-timing-{:08x}", rand::random::<u32>()));
    common::copy_dir(&real.root, &dir);
    let head = |id: &str| {
        format!("id: {id}\nsince: 0.1.0\nlevel: recommended\nsummary: misses its bound.\nrequires: [python]\n")
    };
    std::fs::write(
        dir.join("cases/timing.private.yaml"),
        format!(
            "{}environment:\n  worker_config: {{warm_pool: 0}}\n{SLOW_STEP}",
            head("timing.private")
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("cases/timing.shared.yaml"),
        format!("{}{SLOW_STEP}", head("timing.shared")),
    )
    .unwrap();
    dir
}

async fn run_one(golden: &Path, id: &str, mode: Mode) -> (Report, String) {
    let mut options = SuiteOptions::new("sandbox-code-runner", mode);
    options.golden = Some(golden.to_path_buf());
    options.filters = vec![id.into()];
    options.progress = false;
    let report = run(options).await.expect("the run completes");
    let case = report
        .cases
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no result for {id}"));
    assert_eq!(case.verdict, Verdict::Fail, "{id}: {case:?}");
    let message = case.message.clone().unwrap_or_default();
    eprintln!("{id}:\n{message}");
    (report, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_bound_names_the_sandbox_calls_it_spent_its_time_in() {
    let golden = golden_with_slow_cases();
    let (_, message) = run_one(
        &golden,
        "timing.private",
        Mode::Hermetic {
            worker_cmd: Some(common::our_worker()),
        },
    )
    .await;
    assert!(message.contains("the bound is 300 ms"), "{message}");
    assert!(message.contains("where the time went"), "{message}");
    // One line per call: offset, function, what it was about, duration, outcome.
    let line = |function: &str| {
        regex::Regex::new(&format!(
            r"(?m)^\s+[+-]\d+\.\d{{3}} s  {function}\s+.*  \d+ ms  ok$"
        ))
        .unwrap()
    };
    for function in ["sandbox::create", "sandbox::exec"] {
        assert!(line(function).is_match(&message), "{function}: {message}");
    }
    // The exec that ran the code took the sleep, and says how it exited.
    let exec_ms = regex::Regex::new(
        r"(?m)^\s+\+\d+\.\d{3} s  sandbox::exec\s+\S+ .*\(exit 0\)  (\d+) ms  ok$",
    )
    .unwrap()
    .captures_iter(&message)
    .filter_map(|c| c[1].parse::<u64>().ok())
    .max();
    assert!(
        exec_ms.is_some_and(|ms| ms >= 1500),
        "{exec_ms:?}: {message}"
    );
    assert!(
        message.contains("the daemon was busy") && !message.contains("other case"),
        "a private environment runs this case alone: {message}"
    );
    let _ = std::fs::remove_dir_all(golden);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_live_engine_it_says_the_harness_cannot_see_the_calls() {
    let (bench, mut w) = common::stack_with_our_worker("timing-test").await;
    let golden = golden_with_slow_cases();
    let (_, message) = run_one(&golden, "timing.shared", Mode::Live { url: bench.url() }).await;
    assert!(message.contains("the bound is 300 ms"), "{message}");
    assert!(
        message.contains("where the time went: unknown")
            && message.contains("no daemon double")
            && !message.contains("sandbox::exec"),
        "{message}"
    );
    w.stop().await;
    bench.shutdown().await;
    let _ = std::fs::remove_dir_all(golden);
}
