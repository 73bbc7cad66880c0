//! `iii.worker.yaml` stays true to the code: its config defaults are the
//! worker's, its functions are the ones published, and it names its daemon.

use code_runner_conformance::suite::env::WorkerCommand;
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
fn the_guest_listener_section_is_the_codes() {
    use sandbox_code_runner::guest_access::{
        GUEST_AUTH, GUEST_MIDDLEWARE, GUEST_REGISTER, GUEST_TRIGGER, INTERNAL_FUNCTIONS,
    };
    let m = manifest();
    let g = &m["guest_listener"];
    assert_eq!(g["auth_function_id"].as_str(), Some(GUEST_AUTH));
    assert_eq!(
        g["on_function_registration_function_id"].as_str(),
        Some(GUEST_REGISTER)
    );
    assert_eq!(g["middleware_function_id"].as_str(), Some(GUEST_MIDDLEWARE));
    assert_eq!(
        g["on_trigger_registration_function_id"].as_str(),
        Some(GUEST_TRIGGER)
    );
    for key in g["tenant_settings"].as_sequence().expect("tenant_settings") {
        let key = key.as_str().unwrap();
        Config::parse(&format!("{key}: 3\n"))
            .unwrap_or_else(|e| panic!("{key} is not a worker config key: {e}"));
    }
    for key in g["guest_share_settings"]
        .as_sequence()
        .expect("guest_share_settings")
    {
        let key = key.as_str().unwrap();
        Config::parse(&format!("{key}: 1\n"))
            .unwrap_or_else(|e| panic!("{key} is not a worker config key: {e}"));
    }
    let setting = g["worker_setting"].as_str().expect("worker_setting");
    let parsed = Config::parse(&format!("{setting}: ws://127.0.0.1:49135\n"))
        .expect("the named setting is a worker config key");
    assert_eq!(parsed.guest_url.as_deref(), Some("ws://127.0.0.1:49135"));
    // The command it names runs and prints the engine block.
    let cmd = g["config_command"].as_str().expect("config_command");
    let mut words = cmd.split_whitespace();
    assert_eq!(words.next(), Some("sandbox-code-runner"));
    let out = WorkerCommand::program(env!("CARGO_BIN_EXE_sandbox-code-runner"))
        .output(words)
        .expect("runs");
    assert!(out.status.success(), "{cmd} fails");
    let printed = String::from_utf8_lossy(&out.stdout);
    for hook in [GUEST_AUTH, GUEST_REGISTER, GUEST_MIDDLEWARE, GUEST_TRIGGER] {
        assert!(printed.contains(hook), "{cmd} omits {hook}");
    }
    // Every internal function is forbidden to guests.
    for f in m["functions"].as_sequence().unwrap() {
        if f["internal"].as_bool() == Some(true) {
            let id = f["id"].as_str().unwrap();
            assert!(
                INTERNAL_FUNCTIONS.contains(&id),
                "{id} is internal but guests may call it (add it to guest_access::INTERNAL_FUNCTIONS)"
            );
        }
    }
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
