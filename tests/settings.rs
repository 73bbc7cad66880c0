//! The live knob end to end: the configuration entry, hot-applied through
//! the configuration-worker double, binding and unbinding the guidance hook.

mod common;

use std::time::Duration;

use common::{wait_for, Harness, TriggerProvider};
use serde_json::{json, Value};

const GUIDANCE_FN: &str = "sandbox-code-runner::inject-guidance";

const HOOK: &str = "harness::hook::pre-generate";

/// The harness's view: is the guidance function bound to its hook?
async fn hook_bound(harness: &TriggerProvider) -> bool {
    !harness.bindings(HOOK, GUIDANCE_FN).is_empty()
}

async fn set(h: &Harness, on: bool) -> Value {
    h.call(
        "configuration::set",
        json!({"id": "sandbox-code-runner", "value": {"inject_guidance": on}}),
    )
    .await
    .expect("configuration::set")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inject_guidance_hot_applies() {
    let h = Harness::start_with_configuration("").await;
    let harness = TriggerProvider::start(&h.bench.url(), &[HOOK]).await;
    assert!(
        wait_for(Duration::from_secs(20), || hook_bound(&harness)).await,
        "on by default: the hook is bound"
    );
    let entry = h
        .call("configuration::get", json!({"id": "sandbox-code-runner"}))
        .await
        .expect("the worker registered its entry");
    assert_eq!(entry["id"], "sandbox-code-runner");

    let changed = set(&h, false).await;
    assert_eq!(changed["new_value"], json!({"inject_guidance": false}));
    assert!(
        wait_for(Duration::from_secs(20), || async {
            !hook_bound(&harness).await
        })
        .await,
        "off: the hook is unbound without a restart"
    );
    let noop = h
        .call(GUIDANCE_FN, json!({"generate": {"system_prompt": "base"}}))
        .await
        .unwrap();
    assert_eq!(noop, json!({"mutations": {}}));

    set(&h, true).await;
    assert!(
        wait_for(Duration::from_secs(20), || hook_bound(&harness)).await,
        "on again: bound again"
    );
    let out = h
        .call(GUIDANCE_FN, json!({"generate": {"system_prompt": "base"}}))
        .await
        .unwrap();
    let prompt = out["mutations"]["system_prompt"].as_str().unwrap();
    assert!(prompt.starts_with("base\n\n") && prompt.contains("sandbox-code-runner::run"));

    // A value the schema refuses is refused by the configuration worker.
    let e = h
        .call(
            "configuration::set",
            json!({"id": "sandbox-code-runner", "value": {"inject_guidance": "nope"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "SCHEMA_INVALID");
    // Persisted as YAML, one file per id.
    let stored = std::fs::read_to_string(h.dir().join("configuration/sandbox-code-runner.yaml"))
        .expect("persisted entry");
    assert!(stored.contains("inject_guidance: true"), "{stored}");
    // Internal functions stay out of the public catalog.
    let list = h.call("engine::functions::list", json!({})).await.unwrap();
    let ids: Vec<&str> = list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function_id"].as_str())
        .collect();
    assert!(ids.contains(&"sandbox-code-runner::run"));
    assert!(!ids.contains(&GUIDANCE_FN));
    harness.shutdown().await;
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boots_and_serves_without_a_configuration_worker() {
    let h = Harness::start("").await;
    let harness = TriggerProvider::start(&h.bench.url(), &[HOOK]).await;
    let out = h
        .run(json!({"lang": "python", "code": "print(2+2)"}))
        .await
        .unwrap();
    assert_eq!(out["stdout"], "4\n");
    let warned = wait_for(Duration::from_secs(20), || async {
        h.log().contains("configuration worker unavailable")
    })
    .await;
    assert!(warned, "a warning, then the defaults");
    assert!(
        wait_for(Duration::from_secs(20), || hook_bound(&harness)).await,
        "defaults apply: inject_guidance is on"
    );
    harness.shutdown().await;
    h.finish(0).await;
}
