//! Unit tables of the suite's own machinery: matchers, envelopes, the error
//! table's closed world, expectations, globs, schema normalization — and the
//! golden data's own consistency (every target's closed world holds, every
//! case is traced to a contract line).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use code_runner_conformance::suite::case::{glob_match, load_cases};
use code_runner_conformance::suite::errors::{
    classify, closed_world_observed, closed_world_static, Envelope, ErrorEntry, ErrorTable,
    Observed,
};
use code_runner_conformance::suite::expectations::{Expectations, Expected, Verdict};
use code_runner_conformance::suite::matcher::Matcher;
use code_runner_conformance::suite::schema::{differences, normalize};
use code_runner_conformance::suite::target::Target;
use code_runner_conformance::suite::vars::Vars;
use code_runner_conformance::suite::{closed_world_static as target_closed_world, load, Golden};
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
        per_source["seed-000"] >= 40 && per_source["worker-contract"] >= 60,
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
