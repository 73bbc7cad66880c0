//! insta snapshots of the golden schemas as the suite compares them
//! (normalized), and of the `compat` wire diff between the two documented
//! workers. A change to either shows up as a snapshot diff to review.

use code_runner_conformance::suite::cli::compat_report;
use code_runner_conformance::suite::schema::{load_target, normalize, FunctionSchemas};
use code_runner_conformance::suite::target::Target;
use code_runner_conformance::suite::Golden;

#[test]
fn normalized_golden_schemas() {
    let g = Golden::locate(None).expect("golden directory");
    for t in Target::load_all(&g.targets()).expect("targets") {
        if !g.schemas().join(&t.name).is_dir() {
            // The reference worker's targets: it publishes no schemas, and
            // their expectations list the schema checks as failures.
            eprintln!("{}: no golden schemas", t.name);
            continue;
        }
        let entries = load_target(&g.schemas(), &t.name).expect("golden schemas");
        for (function, entry) in entries {
            let s = FunctionSchemas::from_entry(&entry);
            insta::assert_json_snapshot!(
                format!("golden__{}__{}", t.name, function),
                serde_json::json!({
                    "request_schema": normalize(&s.request),
                    "response_schema": normalize(&s.response),
                })
            );
        }
    }
}

#[test]
fn compat_sandbox_code_runner_vs_code_runner() {
    let report = compat_report(None, "sandbox-code-runner", "code-runner").expect("compat");
    insta::assert_snapshot!("compat__sandbox-code-runner__code-runner", report.render());
    // The run/register/teardown wire the contract promises: code-runner only
    // adds fields, never changes or drops one a caller of ours relies on;
    // ours adds only sessions (docs/contract.md: a `session: true` caller
    // gets on code-runner what its kept runtimes always do, kept globals;
    // only the answer's `session` is ours alone) and streaming (`output`: a
    // run given one on code-runner answers as ever, with no frames and no
    // `output` in its answer; the profile value `output_stream` says which
    // target streams).
    let ours_alone = [("run", "session"), ("run", "output")];
    for f in report
        .functions
        .iter()
        .filter(|f| ["run", "register_function", "teardown"].contains(&f.function.as_str()))
    {
        for d in f.request.iter().chain(&f.response) {
            let extension = ours_alone.contains(&(f.function.as_str(), d.field.as_str()));
            assert!(
                matches!(
                    d.change,
                    code_runner_conformance::suite::schema::FieldChange::Same
                        | code_runner_conformance::suite::schema::FieldChange::OnlyB
                ) || (extension
                    && d.change == code_runner_conformance::suite::schema::FieldChange::OnlyA),
                "{} {}: {:?}",
                f.function,
                d.field,
                d
            );
        }
    }
}
