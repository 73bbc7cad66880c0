//! Proof that the suite can fail: a deliberately broken target.
//!
//! The mutant is a small proxy worker registering `mutant::*`, forwarding to
//! the real `sandbox-code-runner::*` (error codes renamed to its prefix) with
//! three mutations:
//! - a keep run's answer loses its `runtime_id`;
//! - teardown's `invalid_request` comes back as `runtime_not_found`;
//! - `mutant::run` registers a drifted response schema (no `runtime_id`).
//!
//! The suite runs against it (live mode, our target's profile, prefix
//! `mutant`) over a fixed selection of cases, with an expectations file
//! that lists a case the mutant passes. It must report exactly the cases
//! that should fail — no more, no fewer.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use code_runner_conformance::suite::draft::KNOWN_FUNCTIONS;
use code_runner_conformance::suite::expectations::Verdict;
use code_runner_conformance::suite::{run, Mode, SuiteOptions};
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::FunctionRef;
use iii_sdk::{IIIClient, RegisterFunction};
use serde_json::{json, Value};

async fn forward(
    client: IIIClient,
    function: &'static str,
    payload: Value,
) -> Result<Value, iii_sdk::Error> {
    let mut payload = payload;
    if let Value::Object(m) = &mut payload {
        m.remove("_caller_worker_id");
    }
    let keep = payload.get("keep") == Some(&Value::Bool(true));
    let answer = client
        .trigger(TriggerRequest {
            function_id: format!("sandbox-code-runner::{function}"),
            payload,
            action: None,
            timeout_ms: Some(120_000),
        })
        .await;
    match answer {
        Ok(mut v) => {
            if function == "run" && keep {
                // Mutation 1: the capability goes missing.
                if let Value::Object(m) = &mut v {
                    m.remove("runtime_id");
                }
            }
            Ok(v)
        }
        Err(iii_sdk::Error::Remote { code, message, .. }) => {
            let mut code = code.replace("sandbox-code-runner::", "mutant::");
            let mut message = message.replace("sandbox-code-runner::", "mutant::");
            if function == "teardown" && code == "mutant::invalid_request" {
                // Mutation 2: the wrong error code.
                code = "mutant::runtime_not_found".into();
                message = message.replacen("invalid_request", "runtime_not_found", 1);
            }
            Err(iii_sdk::Error::Remote {
                code,
                message,
                stacktrace: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// Registers the mutant's functions, schemas copied from the real worker
/// except `run`'s response (mutation 3: drift).
async fn start_mutant(url: &str) -> (IIIClient, Vec<FunctionRef>) {
    let client = code_runner_conformance::standin::client::connect(url, "mutant")
        .await
        .expect("mutant connects");
    let mut refs = Vec::new();
    for function in KNOWN_FUNCTIONS {
        let info = client
            .trigger(TriggerRequest {
                function_id: "engine::functions::info".into(),
                payload: json!({ "function_id": format!("sandbox-code-runner::{function}") }),
                action: None,
                timeout_ms: Some(10_000),
            })
            .await
            .expect("the real function is listed");
        let mut response = info.get("response_schema").cloned().unwrap_or(json!({}));
        if function == "run" {
            if let Some(props) = response
                .get_mut("properties")
                .and_then(Value::as_object_mut)
            {
                props.remove("runtime_id");
            }
        }
        let c = client.clone();
        let mut reg = RegisterFunction::new_async(move |payload: Value| {
            forward(c.clone(), function, payload)
        })
        .response_format(response);
        if let Some(r) = info.get("request_schema") {
            reg = reg.request_format(r.clone());
        }
        if let Some(d) = info.get("description").and_then(Value::as_str) {
            reg = reg.description(d.to_string());
        }
        if let Some(m) = info.get("metadata").filter(|m| !m.is_null()) {
            reg = reg.metadata(m.clone());
        }
        refs.push(client.register_function(format!("mutant::{function}"), reg));
    }
    (client, refs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_reports_exactly_the_broken_cases() {
    let (bench, mut real) = common::stack_with_our_worker("mutant-test").await;
    let url = bench.url();
    let (mutant, refs) = start_mutant(&url).await;

    let dir = std::env::temp_dir().join(format!("suite-can-fail-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let expectations = dir.join("expectations.yaml");
    std::fs::write(
        &expectations,
        "target: sandbox-code-runner\nexpected_failures:\n  - case: run.one-shot.print\n    reason: deliberately stale — the mutant passes it\n",
    )
    .unwrap();

    let mut options = SuiteOptions::new("sandbox-code-runner", Mode::Live { url: url.clone() });
    options.prefix = Some("mutant".into());
    options.expectations = Some(expectations);
    options.jobs = 4;
    options.filters = vec![
        // should fail
        "run.keep.returns-runtime-id".into(),
        "teardown.exactly-one".into(),
        "schema.run".into(),
        "run.one-shot.print".into(),
        // should pass against the mutant
        "run.failing-script.python".into(),
        "teardown.unknown-runtime-id".into(),
        "teardown.by-namespace-canonical-form".into(),
        "register.seed-example".into(),
        "schema.teardown".into(),
        "schema.register_function".into(),
        "errors.closed-world".into(),
    ];
    let report = tokio::time::timeout(Duration::from_secs(300), run(options))
        .await
        .expect("the suite finishes")
        .expect("the suite runs");
    eprint!("{}", report.summary_text());

    let verdict = |id: &str| {
        report
            .cases
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.verdict)
            .unwrap_or_else(|| panic!("no verdict for {id}"))
    };
    let unexpected: BTreeSet<&str> = report.unexpected().iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        unexpected,
        BTreeSet::from([
            "run.keep.returns-runtime-id",
            "teardown.exactly-one",
            "schema.run",
            "run.one-shot.print",
        ]),
        "{:#?}",
        report.cases
    );
    assert_eq!(verdict("run.one-shot.print"), Verdict::Stale);
    for id in [
        "run.keep.returns-runtime-id",
        "teardown.exactly-one",
        "schema.run",
    ] {
        assert_eq!(verdict(id), Verdict::Fail, "{id}");
    }
    for id in [
        "run.failing-script.python",
        "teardown.unknown-runtime-id",
        "teardown.by-namespace-canonical-form",
        "register.seed-example",
        "schema.teardown",
        "schema.register_function",
        "errors.closed-world",
    ] {
        assert_eq!(verdict(id), Verdict::Pass, "{id}");
    }
    assert_eq!(report.cases.len(), 11);
    assert!(!report.ok());

    // Each failure says what broke.
    let message = |id: &str| {
        report
            .cases
            .iter()
            .find(|c| c.id == id)
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    assert!(message("run.keep.returns-runtime-id").contains("/runtime_id"));
    assert!(message("teardown.exactly-one")
        .contains("expected error mutant::invalid_request, got mutant::runtime_not_found"));
    assert!(
        message("schema.run").contains("schema drift")
            && message("schema.run").contains("runtime_id")
    );
    assert!(message("run.one-shot.print").contains("stale"));
    // Results are grouped by level: three contract problems, one recommended.
    assert_eq!(
        report.by_level["contract"].unexpected, 3,
        "{:?}",
        report.by_level
    );
    assert_eq!(
        report.by_level["recommended"].unexpected, 1,
        "{:?}",
        report.by_level
    );
    // A failing step shows what came back, not only which field differed.
    assert!(
        message("run.keep.returns-runtime-id").contains("got: ")
            && message("run.keep.returns-runtime-id").contains("stdout: "),
        "{}",
        message("run.keep.returns-runtime-id")
    );
    // The mutant's errors travelled in the code-field envelope.
    assert!(report.envelopes.contains_key("code_field"));
    // The JUnit report carries the same verdicts.
    let junit = report.junit();
    assert_eq!(junit.matches("<failure ").count(), 4, "{junit}");
    assert!(
        junit.contains("— contract\"") && junit.contains("— recommended\""),
        "{junit}"
    );
    assert!(junit.contains(r#"type="stale-expectation""#));

    for f in refs {
        f.unregister();
    }
    mutant.shutdown_async().await;
    real.stop().await;
    bench.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
