//! `iii.worker.yaml` stays true to the code: its config defaults are the
//! worker's, its functions are the ones published, and it names its daemon.

use sandbox_code_runner::config::Config;
use serde_yaml::Value;

fn manifest() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/iii.worker.yaml"))
        .expect("iii.worker.yaml exists");
    serde_yaml::from_str(&text).expect("iii.worker.yaml parses")
}

#[test]
fn identity_and_dependency() {
    let m = manifest();
    assert_eq!(m["iii"].as_str(), Some("v1"));
    assert_eq!(m["name"].as_str(), Some("sandbox-code-runner"));
    assert!(m["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(
        m["dependencies"]["iii-sandbox"].as_str().is_some(),
        "compose::add must bring iii-sandbox along"
    );
}

#[test]
fn config_defaults_are_the_workers() {
    let m = manifest();
    let text = serde_yaml::to_string(&m["config"]).unwrap();
    let parsed = Config::parse(&text).expect("manifest config is a valid worker config");
    assert_eq!(parsed, Config::default());
    assert_eq!(
        m["configuration"]["defaults"]["inject_guidance"].as_bool(),
        Some(sandbox_code_runner::settings::LiveSettings::default().inject_guidance)
    );
}

#[test]
fn functions_are_the_published_ones() {
    let m = manifest();
    let listed: Vec<&str> = m["functions"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    for f in sandbox_code_runner::functions::specs() {
        assert!(
            listed.contains(&f.id.as_str()),
            "{} missing from the manifest",
            f.id
        );
    }
    assert!(listed.contains(&sandbox_code_runner::settings::GUIDANCE_FN));
    assert!(listed.contains(&sandbox_code_runner::functions::STATS));
}

#[test]
fn trigger_types_are_the_provided_ones() {
    let m = manifest();
    let listed: Vec<&str> = m["trigger_types"]
        .as_sequence()
        .expect("trigger_types")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(listed, [sandbox_code_runner::events::TRIGGER_TYPE]);
    let described = m["trigger_types"][0]["description"].as_str().unwrap();
    for kind in sandbox_code_runner::events::EventKind::ALL {
        assert!(
            described.contains(kind.as_str()),
            "{} missing from the manifest",
            kind.as_str()
        );
    }
}
