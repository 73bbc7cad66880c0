//! What a profile may do to a run, checked on the golden data:
//!
//! - profile values refine checks; they never turn a `recommended` one off:
//!   no recommended case is gated on a value that only refines (the loader
//!   refuses one), and every recommended case our profile runs still runs
//!   when the profile is silent about those values or says `false`;
//! - a case that reads a profile value (`${profile.<feature>}`, a field name
//!   the worker chose) requires it, so it skips where the value is absent;
//! - what newcomers read in conformance/README.md about what a run prints
//!   matches the golden data.

use std::path::PathBuf;

use code_runner_conformance::suite::case::{load_cases, Level};
use code_runner_conformance::suite::target::{requirement_feature, Feature, Target, REFINES_ONLY};
use code_runner_conformance::suite::{Golden, SUITE_VERSION};
use serde_json::Value;

fn golden() -> Golden {
    Golden::locate(None).expect("golden directory")
}

/// `(id, level, requires)` of every golden case, read off its file.
fn case_requirements() -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(golden().cases()).expect("golden/cases") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a case file");
        let v: Value = serde_yaml::from_str(&text).expect("YAML");
        let requires = v
            .get("requires")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        out.push((
            v["id"].as_str().expect("id").to_string(),
            v["level"].as_str().expect("level").to_string(),
            requires,
        ));
    }
    out
}

#[test]
fn the_loader_refuses_a_recommended_case_gated_on_a_value_that_only_refines() {
    let dir = std::env::temp_dir().join(format!("suite-refine-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("x.capped.yaml"),
        "id: x.capped\nsince: 0.1.0\nlevel: recommended\nrequires: [python, \"stream_cap_bytes=16384\"]\nsteps: [{trigger: run, payload: {}}]\n",
    )
    .unwrap();
    let e = load_cases(&dir, SUITE_VERSION).expect_err("refused");
    let shown = format!("{e:?}");
    assert!(
        shown.contains("stream_cap_bytes") && shown.contains("refine"),
        "{shown}"
    );
    // As a `profile` case it is fine: profile cases run where the value is declared.
    std::fs::write(
        dir.join("x.capped.yaml"),
        "id: x.capped\nsince: 0.1.0\nlevel: profile\nrequires: [python, \"stream_cap_bytes=16384\"]\nsteps: [{trigger: run, payload: {}}]\n",
    )
    .unwrap();
    assert_eq!(load_cases(&dir, SUITE_VERSION).expect("loads").len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_case_reading_a_profile_value_requires_it() {
    let dir = std::env::temp_dir().join(format!("suite-pvalue-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = |requires: &str| {
        format!(
            "id: x.field\nsince: 0.1.0\nlevel: recommended\nrequires: [{requires}]\nsteps:\n  - trigger: list_runtimes\n    payload: {{}}\n    expect: {{response: {{$somewhere: {{\"${{profile.list_runtimes_functions_field}}\": []}}}}}}\n"
        )
    };
    std::fs::write(dir.join("x.field.yaml"), case("list_runtimes")).unwrap();
    let e = load_cases(&dir, SUITE_VERSION).expect_err("refused");
    let shown = format!("{e:?}");
    assert!(
        shown.contains("list_runtimes_functions_field") && shown.contains("requires"),
        "{shown}"
    );
    std::fs::write(
        dir.join("x.field.yaml"),
        case("list_runtimes, list_runtimes_functions_field"),
    )
    .unwrap();
    assert_eq!(load_cases(&dir, SUITE_VERSION).expect("loads").len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_silent_or_negative_profile_turns_no_recommended_check_off() {
    let ours = Target::load(&golden().targets(), "sandbox-code-runner").expect("our target");
    let mut silent = ours.clone();
    let mut negative = ours.clone();
    for f in REFINES_ONLY {
        silent.profile.remove(*f);
        negative.profile.insert(
            f.to_string(),
            Feature {
                value: Value::Bool(false),
                source: String::new(),
            },
        );
    }
    let mut recommended = 0;
    for (id, level, requires) in case_requirements() {
        if level != "recommended" || requires.iter().any(|r| ours.check(r).is_err()) {
            continue;
        }
        recommended += 1;
        for r in &requires {
            assert!(
                !REFINES_ONLY.contains(&requirement_feature(r)),
                "{id} is gated on `{r}`, a value that only refines"
            );
            for (name, t) in [("silent", &silent), ("negative", &negative)] {
                assert!(
                    t.check(r).is_ok(),
                    "{id}: a {name} profile turns it off ({r})"
                );
            }
        }
    }
    assert!(recommended >= 40, "{recommended} recommended cases checked");
    // The output-cap cases run without a figure and take ours where stated.
    let cases = load_cases(&golden().cases(), SUITE_VERSION).expect("cases");
    let stdout = cases
        .iter()
        .find(|c| c.id == "run.output-cap.stdout")
        .expect("run.output-cap.stdout");
    assert_eq!(stdout.level, Level::Recommended);
}

/// The lines of conformance/README.md's sample run output.
fn readme() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(path).expect("conformance/README.md")
}

#[test]
fn the_readme_sample_output_lists_what_our_profile_lists() {
    let ours = Target::load(&golden().targets(), "sandbox-code-runner").expect("our target");
    let text = readme();
    let present = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("present: "))
        .expect("the README shows a `present:` line");
    assert_eq!(
        present.split(", ").collect::<Vec<_>>(),
        ours.functions,
        "conformance/README.md's `present:` line"
    );
    // Counts of cases go stale with every case added: the README states none.
    let numbered = regex::Regex::new(r"\b\d+ (cases|case files|jobs|schema snapshots)\b").unwrap();
    assert!(
        !numbered.is_match(&text),
        "conformance/README.md states a count that no test keeps true: {:?}",
        numbered.find(&text).map(|m| m.as_str())
    );
}
