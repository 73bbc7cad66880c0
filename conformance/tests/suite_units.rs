//! Unit tables of the suite's own machinery: matchers, envelopes, the error
//! table's closed world, expectations, globs, schema normalization — and the
//! golden data's own consistency (every target's closed world holds, every
//! case is traced to a contract line).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use code_runner_conformance::suite::case::{glob_match, load_cases, Case, Level};
use code_runner_conformance::suite::errors::{
    classify, closed_world_observed, closed_world_static, Envelope, ErrorEntry, ErrorTable,
    Observed,
};
use code_runner_conformance::suite::expectations::{Expectations, Expected, Verdict};
use code_runner_conformance::suite::matcher::Matcher;
use code_runner_conformance::suite::published::Published;
use code_runner_conformance::suite::report::{CaseReport, LevelGate, Report};
use code_runner_conformance::suite::runner::{got_error, got_response, truncate_middle};
use code_runner_conformance::suite::schema::{differences, normalize};
use code_runner_conformance::suite::target::Target;
use code_runner_conformance::suite::vars::Vars;
use code_runner_conformance::suite::{closed_world_static as target_closed_world, load, Golden};
use code_runner_conformance::suite::{Mode, SuiteError, SuiteOptions};
use rstest::rstest;
use serde_json::{json, Value};

fn matcher(spec: Value) -> Matcher {
    let mut vars = Vars::new();
    vars.set("rt", json!("rt-1.2"));
    vars.set("n", json!(21));
    Matcher::parse(&spec, &vars).expect("matcher parses")
}

#[rstest]
// exact values, numbers compared numerically
#[case(json!("4\n"), Some(json!("4\n")), true)]
#[case(json!("4\n"), Some(json!("4")), false)]
#[case(json!(4), Some(json!(4.0)), true)]
#[case(json!(true), Some(json!(1)), false)]
#[case(json!({"$exact": {"a": [1]}}), Some(json!({"a": [1]})), true)]
#[case(json!({"$exact": {"a": [1]}}), Some(json!({"a": [1], "b": 2})), false)]
// type-only
#[case(json!({"$type": "integer"}), Some(json!(12)), true)]
#[case(json!({"$type": "integer"}), Some(json!(1.5)), false)]
#[case(json!({"$type": "integer"}), Some(json!("12")), false)]
#[case(json!({"$type": "string"}), Some(json!("x")), true)]
#[case(json!({"$type": "number"}), Some(json!(1.5)), true)]
#[case(json!({"$type": "boolean"}), Some(json!(false)), true)]
#[case(json!({"$type": "array"}), Some(json!({})), false)]
#[case(json!({"$type": "object"}), Some(json!({})), true)]
#[case(json!({"$type": "null"}), Some(json!(null)), true)]
// regex, and placeholders spliced regex-escaped
#[case(json!({"$regex": "^rt-[0-9a-f]{8}-"}), Some(json!("rt-0123abcd-x")), true)]
#[case(json!({"$regex": "^rt-"}), Some(json!("xrt-")), false)]
#[case(json!({"$regex": "^rt-"}), Some(json!(5)), false)]
#[case(json!({"$regex": "^${rt}$"}), Some(json!("rt-1.2")), true)]
#[case(json!({"$regex": "^${rt}$"}), Some(json!("rt-1x2")), false)]
#[case(json!({"$not_regex": "truncated.*truncated"}), Some(json!("truncated once")), true)]
#[case(json!({"$contains": "Error"}), Some(json!("NameError: x")), true)]
#[case(json!({"$not_contains": "${rt}"}), Some(json!("rt-1.2 leaked")), false)]
// absent vs null vs any
#[case(json!({"$absent": true}), None, true)]
#[case(json!({"$absent": true}), Some(json!(null)), false)]
#[case(json!(null), Some(json!(null)), true)]
#[case(json!(null), None, false)]
#[case(json!({"$null": true}), Some(json!(0)), false)]
#[case(json!({"$any": true}), Some(json!(null)), true)]
#[case(json!({"$any": true}), None, false)]
#[case(json!({"$optional": 3}), None, true)]
#[case(json!({"$optional": 3}), Some(json!(4)), false)]
// placeholders keep their type when whole
#[case(json!("${n}"), Some(json!(21)), true)]
#[case(json!("${n}"), Some(json!("21")), false)]
// arrays
#[case(json!([1, {"$type": "string"}]), Some(json!([1, "x"])), true)]
#[case(json!([1]), Some(json!([1, 2])), false)]
// lists are multisets unless a case says order matters
#[case(json!(["b", "a"]), Some(json!(["a", "b"])), true)]
#[case(json!(["a", "a", "b"]), Some(json!(["a", "b", "b"])), false)]
#[case(json!([{"$type": "string"}, "x"]), Some(json!(["x", "y"])), true)]
#[case(json!([{"$regex": "^a"}, "ab"]), Some(json!(["ab", "ac"])), true)]
#[case(json!({"$exact": ["a", "b"]}), Some(json!(["b", "a"])), true)]
#[case(json!({"$exact": [1, 1, 2]}), Some(json!([1, 2, 2])), false)]
#[case(json!({"$ordered": ["b", "a"], "why": "the seed shows this order"}), Some(json!(["a", "b"])), false)]
#[case(json!({"$ordered": ["a", "b"], "why": "the seed shows this order"}), Some(json!(["a", "b"])), true)]
#[case(json!({"$items": {"$type": "integer"}}), Some(json!([1, 2])), true)]
#[case(json!({"$items": {"$type": "integer"}}), Some(json!([1, "2"])), false)]
#[case(json!({"$some": {"id": 2}}), Some(json!([{"id": 1}, {"id": 2}])), true)]
#[case(json!({"$none": {"id": 2}}), Some(json!([{"id": 1}, {"id": 2}])), false)]
#[case(json!({"$len": {"min": 2, "max": 3}}), Some(json!("abc")), true)]
#[case(json!({"$len": {"max": 2}}), Some(json!([1, 2, 3])), false)]
// combinators and deep searches
#[case(json!({"$all": [{"$type": "integer"}, {"$not": 0}]}), Some(json!(3)), true)]
#[case(json!({"$all": [{"$type": "integer"}, {"$not": 0}]}), Some(json!(0)), false)]
#[case(json!({"$nowhere": "secret"}), Some(json!({"a": ["x", {"b": "a secret"}]})), false)]
#[case(json!({"$nowhere": "secret"}), Some(json!({"secret": 1})), false)]
#[case(json!({"$nowhere_regex": "rt-[0-9a-f]{8}-"}), Some(json!({"a": "rt-nothex"})), true)]
#[case(json!({"$somewhere": {"fns": ["a::f"]}}), Some(json!({"r": [{"k": 1}, {"fns": ["a::f"], "k": 2}]})), true)]
#[case(json!({"$somewhere": {"fns": ["a::f"]}}), Some(json!({"r": [{"fns": ["a::f", "a::g"]}]})), false)]
#[case(json!({"$somewhere": 7}), Some(json!(7)), true)]
#[case(json!({"$somewhere": "a::f"}), Some(json!({"a::f": 1})), false)]
fn matchers(#[case] spec: Value, #[case] actual: Option<Value>, #[case] holds: bool) {
    let m = matcher(spec.clone());
    let mismatches = m.check(actual.as_ref());
    assert_eq!(
        mismatches.is_empty(),
        holds,
        "{spec} against {actual:?}: {mismatches:?}"
    );
}

#[rstest]
// subset by default
#[case(json!({"a": 1}), json!({"a": 1, "b": 2}), true)]
#[case(json!({"a": 1, "c": {"$absent": true}}), json!({"a": 1, "b": 2}), true)]
#[case(json!({"a": 1, "b": {"$absent": true}}), json!({"a": 1, "b": 2}), false)]
// strict
#[case(json!({"a": 1, "$extra": "forbid"}), json!({"a": 1, "b": 2}), false)]
#[case(json!({"a": 1, "$extra": "forbid"}), json!({"a": 1}), true)]
#[case(json!({"$object": {"$weird": 1}, "$extra": "forbid"}), json!({"$weird": 1}), true)]
// absent and null apart, unless the flag says otherwise
#[case(json!({"r": {"$absent": true}}), json!({"r": null}), false)]
#[case(json!({"r": {"$absent": true}, "$null_as_absent": true}), json!({"r": null}), true)]
#[case(json!({"r": null, "$null_as_absent": true}), json!({}), true)]
#[case(json!({"r": null}), json!({}), false)]
#[case(json!({"a": {"b": {"$type": "string"}}}), json!({"a": {"b": "x", "c": 1}}), true)]
#[case(json!({"a": 1}), json!([1]), false)]
fn object_matchers(#[case] spec: Value, #[case] actual: Value, #[case] holds: bool) {
    let m = matcher(spec.clone());
    assert_eq!(m.matches(Some(&actual)), holds, "{spec} against {actual}");
}

#[rstest]
#[case(json!({"$type": "integr"}))]
#[case(json!({"$regex": "("}))]
#[case(json!({"$extra": "sometimes", "a": 1}))]
#[case(json!({"$unknown": 1, "a": 2}))]
#[case(json!({"$len": 3}))]
#[case(json!("${nope}"))]
#[case(json!({"$ordered": ["a"]}))]
#[case(json!({"$ordered": ["a"], "why": " "}))]
#[case(json!({"$ordered": "a", "why": "x"}))]
fn malformed_matchers_are_refused(#[case] spec: Value) {
    assert!(Matcher::parse(&spec, &Vars::new()).is_err(), "{spec}");
}

#[test]
fn mismatches_name_their_path() {
    let m = matcher(json!({"stdout": "4\n", "nested": {"x": [1, {"$type": "string"}]}}));
    let got = m.check(Some(&json!({"stdout": "5\n", "nested": {"x": [1, 2]}})));
    let paths: BTreeSet<&str> = got.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, BTreeSet::from(["/stdout", "/nested/x/1"]));
}

#[rstest]
#[case("sandbox-code-runner::invalid_request", "sandbox-code-runner::invalid_request: `code`: …",
       Observed::Target { code: "invalid_request".into(), envelope: Envelope::CodeField })]
#[case("invocation_failed", "handler error: sandbox-code-runner::expired: the VM was reaped",
       Observed::Target { code: "expired".into(), envelope: Envelope::Upstream })]
#[case("invocation_failed", "sandbox-code-runner::capacity: all slots in use",
       Observed::Target { code: "capacity".into(), envelope: Envelope::Upstream })]
#[case("invocation_failed", "boom: sandbox-code-runner::capacity: not at the head",
       Observed::Unclassified { code: "invocation_failed".into() })]
#[case("invocation_failed", "handler error: something broke",
       Observed::Unclassified { code: "invocation_failed".into() })]
#[case("function_not_found", "Function x::y not found in namespace default.",
       Observed::Engine("function_not_found".into()))]
#[case("code-runner::timeout", "code-runner::timeout: …", Observed::Engine("code-runner::timeout".into()))]
fn envelopes_are_told_apart(#[case] code: &str, #[case] message: &str, #[case] want: Observed) {
    assert_eq!(classify("sandbox-code-runner", code, message), want);
}

fn table(rows: &[(&str, Option<&str>)]) -> ErrorTable {
    ErrorTable {
        target: "t".into(),
        source: String::new(),
        codes: rows
            .iter()
            .map(|(c, reason)| ErrorEntry {
                code: c.to_string(),
                meaning: format!("{c} happened"),
                retryable: false,
                no_case_reason: reason.map(str::to_string),
            })
            .collect(),
    }
}

/// `"case:code,code case:code"` → what each case expects.
fn produced(spec: &str) -> Vec<(String, BTreeSet<String>)> {
    spec.split_whitespace()
        .map(|entry| {
            let (id, codes) = entry.split_once(':').unwrap_or((entry, ""));
            (
                id.to_string(),
                codes
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        })
        .collect()
}

#[rstest]
#[case::every_code_produced(&[("a", None), ("b", None)], "c1:a c2:b,a", &[])]
#[case::reason_instead_of_a_case(&[("a", None), ("b", Some("cannot happen here"))], "c1:a", &[])]
#[case::code_without_case_or_reason(&[("a", None), ("b", None)], "c1:a", &["b"])]
#[case::stale_reason(&[("a", Some("no case can"))], "c1:a", &["a"])]
#[case::case_expects_unknown_code(&[("a", None)], "c1:a,zzz", &["zzz"])]
#[case::no_cases_at_all(&[("a", None)], "", &["a"])]
fn closed_world_holds_both_ways(
    #[case] rows: &[(&str, Option<&str>)],
    #[case] cases: &str,
    #[case] violating: &[&str],
) {
    let v = closed_world_static(&table(rows), &produced(cases));
    let codes: Vec<&str> = v.iter().map(|v| v.code.as_str()).collect();
    assert_eq!(codes, violating, "{v:?}");
}

#[rstest]
#[case::known_code(Observed::Target { code: "a".into(), envelope: Envelope::Upstream }, false)]
#[case::unknown_code(Observed::Target { code: "zzz".into(), envelope: Envelope::CodeField }, true)]
#[case::engine_code(Observed::Engine("function_not_found".into()), false)]
#[case::unclassified(Observed::Unclassified { code: "invocation_failed".into() }, true)]
fn observed_codes_must_be_in_the_table(#[case] seen: Observed, #[case] violation: bool) {
    let v = closed_world_observed(&table(&[("a", None)]), &[("case.x".into(), seen)]);
    assert_eq!(!v.is_empty(), violation, "{v:?}");
}

#[rstest]
#[case::listed_and_failing("c", false, Verdict::ExpectedFail)]
#[case::listed_but_passing("c", true, Verdict::Stale)]
#[case::unlisted_failing("d", false, Verdict::Fail)]
#[case::unlisted_passing("d", true, Verdict::Pass)]
fn expectations_reconcile(#[case] id: &str, #[case] passed: bool, #[case] want: Verdict) {
    let e = Expectations {
        target: "t".into(),
        expected_failures: vec![Expected {
            case: "c".into(),
            reason: "known".into(),
        }],
    };
    assert_eq!(e.verdict(id, passed), want);
    assert_eq!(
        want.unexpected(),
        matches!(want, Verdict::Fail | Verdict::Stale)
    );
}

#[rstest]
#[case("run.*", "run.keep.returns-runtime-id", true)]
#[case("run.*", "register.seed-example", false)]
#[case("*.seed-*", "register.seed-example", true)]
#[case("schema.ru?", "schema.run", true)]
#[case("schema.ru?", "schema.runs", false)]
#[case("*", "anything", true)]
fn globs(#[case] pattern: &str, #[case] id: &str, #[case] hit: bool) {
    assert_eq!(glob_match(pattern, id), hit);
}

#[test]
fn normalization_strips_docs_not_properties_and_equates_integral_floats() {
    let a = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "T", "description": "d",
        "properties": {
            "description": {"type": ["string", "null"], "description": "a field called description"},
            "n": {"type": "integer", "minimum": 0.0}
        }
    });
    let b = json!({"properties": {"n": {"minimum": 0, "type": "integer"}, "description": {"type": ["string", "null"]}}});
    assert_eq!(normalize(&a), normalize(&b));
    let c = json!({"properties": {"n": {"minimum": 1, "type": "integer"}}});
    let d = differences(&normalize(&b), &normalize(&c));
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d.iter().any(|x| x.starts_with("/properties/description")));
    assert!(d.iter().any(|x| x.starts_with("/properties/n/minimum")));
}

fn golden() -> Golden {
    Golden::locate(None).expect("golden directory")
}

#[test]
fn every_targets_golden_data_loads_and_its_closed_world_holds() {
    let g = golden();
    let targets = Target::load_all(&g.targets()).expect("targets load");
    assert!(targets.len() >= 2);
    for t in &targets {
        let loaded = load(&g, &t.name, None).expect("golden data loads");
        let v = target_closed_world(&loaded);
        assert!(v.is_empty(), "{}: {v:?}", t.name);
        if !g.schemas().join(&t.name).is_dir() {
            // The reference worker's targets publish no schemas; their
            // expectations list the `schema.*` checks as failures.
            continue;
        }
        for f in &t.functions {
            let p = g.schemas().join(&t.name).join(format!("{f}.json"));
            assert!(
                p.exists(),
                "{} has no golden schema {}",
                t.name,
                p.display()
            );
        }
    }
}

#[test]
fn our_expectations_stay_empty() {
    let g = golden();
    let e = Expectations::load(&g.expectations("sandbox-code-runner")).unwrap();
    assert!(e.expected_failures.is_empty(), "{e:?}");
}

#[test]
fn every_case_is_traced_to_a_contract_line_and_every_line_has_a_case_or_a_reason() {
    let g = golden();
    let cases = load_cases(&g.cases(), code_runner_conformance::suite::SUITE_VERSION).unwrap();
    let targets = Target::load_all(&g.targets()).unwrap();
    let mut ids: BTreeSet<String> = cases.iter().map(|c| c.id.clone()).collect();
    for t in &targets {
        ids.extend(t.functions.iter().map(|f| format!("schema.{f}")));
    }
    ids.insert(code_runner_conformance::suite::CLOSED_WORLD_CASE.to_string());
    for c in &cases {
        let stem = c.file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        assert_eq!(stem, c.id, "a case file is named after its id");
    }
    let text = std::fs::read_to_string(g.root.join("coverage.yaml")).unwrap();
    let coverage: Value = serde_yaml::from_str(&text).unwrap();
    let lines = coverage["lines"].as_array().expect("lines");
    let mut named = BTreeSet::new();
    let mut per_source: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines {
        let what = format!("{} / {} / {}", l["source"], l["section"], l["line"]);
        *per_source
            .entry(l["source"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
        let cases = l.get("cases").and_then(Value::as_array);
        let reason = l.get("no_case_reason").and_then(Value::as_str);
        assert!(
            cases.is_some_and(|c| !c.is_empty()) != reason.is_some_and(|r| !r.trim().is_empty()),
            "{what}: needs cases or a no_case_reason, not both"
        );
        for c in cases.into_iter().flatten() {
            let id = c.as_str().unwrap_or("");
            assert!(ids.contains(id), "{what}: no case `{id}`");
            named.insert(id.to_string());
        }
    }
    let untraced: Vec<&String> = ids.iter().filter(|i| !named.contains(*i)).collect();
    assert!(
        untraced.is_empty(),
        "cases no contract line names: {untraced:?}"
    );
    assert!(
        per_source["seed-000"] >= 40 && per_source["docs/contract.md"] >= 60,
        "{per_source:?}"
    );
}

#[test]
fn seed_examples_appear_as_written() {
    let g = golden();
    let text = |id: &str| std::fs::read_to_string(g.cases().join(format!("{id}.yaml"))).unwrap();
    let print = text("run.one-shot.print");
    assert!(print.contains("code: \"print(2+2)\"") && print.contains("stdout: \"4\\n\""));
    let seed = text("register.seed-example");
    for needle in [
        "function_id: my-app::double",
        "description: \"Double a number. Payload: { n: number }.\"",
        "return {\"doubled\": payload[\"n\"] * 2}",
        "payload: {n: 21}",
        "{doubled: 42}",
        "namespace: \"my-app::\"",
    ] {
        assert!(
            seed.contains(needle),
            "register.seed-example lacks {needle}"
        );
    }
}

#[test]
fn the_workspace_golden_directory_is_the_one_found() {
    let g = golden();
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../golden");
    assert_eq!(g.root, here.canonicalize().unwrap());
}

// ---------------- levels ----------------

fn case_from(yaml: &str) -> Result<(), String> {
    let v: Value = serde_yaml::from_str(yaml).unwrap();
    let c: Case = serde_json::from_value(v).map_err(|e| e.to_string())?;
    c.validate(code_runner_conformance::suite::SUITE_VERSION)
}

const STEPS: &str = "steps:\n  - trigger: run\n    payload: {lang: python, code: x}\n";

#[rstest]
#[case::contract_quoting_seed_000(
    "level: contract\nsources: ['seed-000 Running code: \"Every VM has outbound network.\"']\n",
    true
)]
#[case::contract_quoting_seed_001(
    "level: contract\nsources: ['seed-001 register_function: \"Re-registering an id replaces it.\"']\n",
    true
)]
#[case::contract_paraphrasing(
    "level: contract\nsources: ['seed-000: Running code — outbound network']\n",
    false
)]
#[case::contract_citing_only_our_doc(
    "level: contract\nsources: ['docs/contract.md: run — x']\n",
    false
)]
#[case::contract_quoting_a_fragment(
    "level: contract\nsources: ['seed-000 Errors: \"capacity\"']\n",
    false
)]
#[case::recommended_without_seed(
    "level: recommended\nsources: ['docs/contract.md: Output caps — x']\n",
    true
)]
#[case::profile_without_requirement("level: profile\nsources: []\n", false)]
#[case::profile_with_requirement("level: profile\nrequires: [\"code_max_bytes=1048576\"]\n", true)]
#[case::no_level("sources: []\n", false)]
#[case::unknown_level("level: mandatory\n", false)]
#[case::citing_the_shared_spec(
    "level: recommended\nsources: ['worker-contract: run — x']\n",
    false
)]
fn levels_are_required_and_contract_cases_quote_a_seed(#[case] head: &str, #[case] valid: bool) {
    let yaml = format!("id: t.case\nsince: 0.1.0\n{head}{STEPS}");
    let r = case_from(&yaml);
    assert_eq!(r.is_ok(), valid, "{yaml}: {r:?}");
}

/// `stretch` names a worker-specific floor and grows a wait or a
/// repetition the step has.
#[rstest]
#[case::a_wait(
    "    eventually_ms: 2000\n    stretch: {by: idle_ttl_floor_secs, eventually_ms: 1000}\n",
    true
)]
#[case::runs(
    "    repeat: 5\n    stretch: {by: idle_ttl_floor_secs, repeat: 1}\n",
    true
)]
#[case::not_a_floor(
    "    eventually_ms: 2000\n    stretch: {by: code_max_bytes, eventually_ms: 1}\n",
    false
)]
#[case::no_wait_to_grow("    stretch: {by: idle_ttl_floor_secs, eventually_ms: 1000}\n", false)]
#[case::no_runs_to_grow(
    "    eventually_ms: 2000\n    stretch: {by: idle_ttl_floor_secs, repeat: 1}\n",
    false
)]
#[case::grows_nothing(
    "    eventually_ms: 2000\n    stretch: {by: idle_ttl_floor_secs}\n",
    false
)]
fn a_stretch_names_a_floor_and_what_it_grows(#[case] step: &str, #[case] valid: bool) {
    let yaml = format!(
        "id: t.case\nsince: 0.1.0\nlevel: recommended\nsteps:\n  - call: sandbox::list\n{step}"
    );
    let r = case_from(&yaml);
    assert_eq!(r.is_ok(), valid, "{yaml}: {r:?}");
}

#[rstest]
#[case(LevelGate::All, Some(Level::Profile), true)]
#[case(LevelGate::All, Some(Level::Contract), true)]
#[case(LevelGate::Recommended, Some(Level::Recommended), true)]
#[case(LevelGate::Recommended, Some(Level::Profile), false)]
#[case(LevelGate::Contract, Some(Level::Recommended), false)]
#[case(LevelGate::Contract, Some(Level::Contract), true)]
#[case(LevelGate::Contract, None, true)]
fn the_level_gate_decides_which_failures_count(
    #[case] gate: LevelGate,
    #[case] level: Option<Level>,
    #[case] counts: bool,
) {
    assert_eq!(gate.counts(level), counts);
}

fn case_report(id: &str, level: Option<Level>, verdict: Verdict, message: &str) -> CaseReport {
    CaseReport {
        id: id.into(),
        level,
        verdict,
        duration_ms: 10,
        message: (!message.is_empty()).then(|| message.to_string()),
        reason: None,
        envelopes: BTreeMap::new(),
        notes: Vec::new(),
        file: None,
    }
}

fn report(gate: LevelGate) -> Report {
    let cases = vec![
        case_report("run.a", Some(Level::Contract), Verdict::Pass, ""),
        case_report("run.b", Some(Level::Contract), Verdict::Skip, ""),
        case_report(
            "run.output-cap.c",
            Some(Level::Recommended),
            Verdict::Fail,
            "step 1 (trigger run): response does not match\ngot: exit_code=0\nstdout: \"x\"",
        ),
        case_report(
            "register.d",
            Some(Level::Profile),
            Verdict::Fail,
            "limits differ",
        ),
    ];
    Report {
        suite_version: "0.1.0".into(),
        target: "t".into(),
        prefix: "p".into(),
        mode: "hermetic".into(),
        level: gate,
        wall_ms: 1000,
        summary: Report::summarize(&cases, gate),
        by_level: Report::summarize_by_level(&cases, gate),
        envelopes: BTreeMap::new(),
        closed_world: Vec::new(),
        cases,
        schemas: BTreeMap::new(),
    }
}

#[rstest]
#[case(LevelGate::All, 2, 0, false)]
#[case(LevelGate::Recommended, 1, 1, false)]
#[case(LevelGate::Contract, 0, 2, true)]
fn the_level_decides_the_exit_status(
    #[case] gate: LevelGate,
    #[case] unexpected: usize,
    #[case] outside: usize,
    #[case] ok: bool,
) {
    let r = report(gate);
    assert_eq!(r.summary.unexpected, unexpected);
    assert_eq!(r.summary.outside_level, outside);
    assert_eq!(r.ok(), ok);
    assert_eq!(r.unexpected().len(), unexpected);
}

#[test]
fn results_are_grouped_by_level_in_summary_json_and_junit() {
    let r = report(LevelGate::Recommended);
    assert_eq!(
        r.by_level.keys().cloned().collect::<Vec<_>>(),
        ["contract", "profile", "recommended"]
    );
    assert_eq!(r.by_level["contract"].passed, 1);
    assert_eq!(r.by_level["contract"].skipped, 1);
    assert_eq!(r.by_level["recommended"].unexpected, 1);
    assert_eq!(r.by_level["profile"].outside_level, 1);
    let text = r.summary_text();
    assert!(text.contains("contract") && text.contains("recommended") && text.contains("profile"));
    assert!(text.contains("outside --level recommended"), "{text}");
    let json: Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["by_level"]["recommended"]["failed"], 1);
    assert_eq!(json["cases"][2]["level"], "recommended");
    assert_eq!(json["level"], "recommended");
    let junit = r.junit();
    assert_eq!(junit.matches("<testsuite ").count(), 3, "{junit}");
    // The profile failure lies outside --level recommended: reported, not a failure.
    assert_eq!(junit.matches("<failure ").count(), 1, "{junit}");
    assert!(junit.contains("outside --level recommended: limits differ"));
}

#[test]
fn a_failure_shows_what_came_back_in_every_report() {
    let r = report(LevelGate::All);
    let text = r.summary_text();
    assert!(
        text.contains("got: exit_code=0") && text.contains("stdout: \"x\""),
        "{text}"
    );
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("got: exit_code=0"));
    assert!(r.junit().contains("got: exit_code=0"));
}

#[test]
fn a_run_response_is_shown_field_by_field_and_long_streams_are_cut_in_the_middle() {
    let stderr = format!(
        "Traceback (most recent call last):\n{}\nNameError: name 'x' is not defined",
        "  frame\n".repeat(400)
    );
    let got =
        got_response(&json!({"stdout": "", "stderr": stderr, "exit_code": 1, "success": false}));
    assert!(got.starts_with("got: exit_code=1 success=false"), "{got}");
    assert!(
        got.contains("stderr: \"Traceback (most recent call last)"),
        "{got}"
    );
    assert!(
        got.contains("NameError: name 'x' is not defined"),
        "the tail stays: {got}"
    );
    assert!(got.contains("chars omitted"), "{got}");
    assert!(got.len() < 1200, "{}", got.len());
    let err = got_error("p", "p::timeout", "p::timeout: the run took too long");
    assert_eq!(
        err,
        "p::timeout (code_field envelope): p::timeout: the run took too long"
    );
    assert_eq!(truncate_middle("short", 10), "short");
}

#[rstest]
#[case("idle_ttl_floor_secs<=1", json!(0), true)]
#[case("idle_ttl_floor_secs<=1", json!(30), false)]
#[case("idle_ttl_floor_secs>=30", json!(30), true)]
#[case("idle_ttl_floor_secs<=1", json!("none"), false)]
#[case("!idle_ttl_floor_secs<=1", json!(30), true)]
#[case("code_max_bytes=1048576", json!(1048576), true)]
fn bounds_are_profile_values_compared_by_requirements(
    #[case] req: &str,
    #[case] value: Value,
    #[case] holds: bool,
) {
    let feature = code_runner_conformance::suite::target::requirement_feature(req).to_string();
    let mut t = Target::load(&golden().targets(), "sandbox-code-runner").unwrap();
    t.profile.insert(
        feature.clone(),
        code_runner_conformance::suite::target::Feature {
            value,
            source: String::new(),
        },
    );
    assert_eq!(t.check(req).is_ok(), holds, "{req}: {:?}", t.check(req));
    assert!(t.undeclared(&[req.to_string()]).is_none());
    t.profile.remove(&feature);
    assert!(t.undeclared(&[req.to_string()]).unwrap().contains(&feature));
}

#[test]
fn published_functions_are_told_apart_from_the_profile() {
    let listed: Vec<String> = ["run", "teardown", "on-config-change"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let published: BTreeSet<String> = ["w::run", "w::teardown", "w::extra", "other::run"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = Published::compare("w", &listed, &published);
    assert_eq!(p.present, ["run", "teardown"]);
    assert_eq!(p.missing, ["on-config-change"]);
    assert_eq!(p.extra, ["extra"]);
    assert!(p.has("run") && !p.has("on-config-change"));
}

#[tokio::test]
async fn a_filter_matching_no_case_is_an_error_naming_it() {
    // A live URL nobody listens on: the filter is refused before any connection.
    let mut o = SuiteOptions::new(
        "sandbox-code-runner",
        Mode::Live {
            url: "ws://127.0.0.1:9".into(),
        },
    );
    o.filters = vec!["run.one-shot.print".into(), "no.such.case*".into()];
    let e = code_runner_conformance::suite::run(o).await.unwrap_err();
    assert!(matches!(e, SuiteError::NoMatch(_)), "{e}");
    assert!(e.to_string().contains("no.such.case*"), "{e}");
}

#[test]
fn every_golden_case_has_a_level_and_the_contract_ones_are_most() {
    let g = golden();
    let cases = load_cases(&g.cases(), code_runner_conformance::suite::SUITE_VERSION).unwrap();
    let mut per: BTreeMap<Level, usize> = BTreeMap::new();
    for c in &cases {
        *per.entry(c.level).or_default() += 1;
        assert!(
            !c.sources.iter().any(|s| s.contains("worker-contract")),
            "{}: cite docs/contract.md",
            c.id
        );
    }
    assert!(per[&Level::Contract] >= 50, "{per:?}");
    assert!(per[&Level::Recommended] >= 20, "{per:?}");
    assert!(per[&Level::Profile] >= 10, "{per:?}");
}

#[tokio::test]
async fn the_worker_log_holds_its_stdout_and_its_stderr() {
    use code_runner_conformance::suite::case::UrlVia;
    use code_runner_conformance::suite::env::{WorkerCommand, WorkerProcess};
    // A "worker" that logs one line on each stream, then idles.
    let cmd =
        WorkerCommand::parse("sh -c 'echo on-stdout; echo on-stderr >&2; exec sleep 30'").unwrap();
    let mut w = WorkerProcess::spawn(&cmd, "ws://127.0.0.1:9", UrlVia::Flag, None).unwrap();
    let both =
        code_runner_conformance::standin::wait::until(std::time::Duration::from_secs(10), || {
            let log = w.log();
            async move { log.contains("on-stdout") && log.contains("on-stderr") }
        })
        .await;
    let log = w.log();
    w.stop().await;
    assert!(both, "the log has both streams: {log:?}");
}
