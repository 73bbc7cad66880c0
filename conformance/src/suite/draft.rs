//! `code-runner-conformance profile`: a draft target profile for a live
//! worker, to start a `golden/targets/<name>.yaml` from.
//!
//! What can be seen from outside is filled in from what the worker shows,
//! marked `observed:`: the functions it publishes under its prefix (every
//! one the suite has cases for), their request/response schemas, the error
//! envelope it answers in, and what a handful of cheap probes show
//! (`probe`: languages, output caps and their size, validation at
//! registration, the documented limits, the runtime id, the guest
//! listener's functions, the fields a run answers, where python runs find
//! the SDK, the shape of `list_runtimes`…; the inject_guidance hook's
//! function from its catalog entry). What cannot be seen falls back to seed 000's
//! answer, and where seed 000 is silent to docs/contract.md's
//! (`defaults`), each marked as such. Only values no document settles are
//! written commented out. The worker-specific floors ([`target::FLOORS`])
//! are stated at a generous default, since the wait they add is only an
//! upper bound.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::{json, Value};

use super::published::{self, EnvelopeProbe, Published};
use super::target::{self, Target};
use super::{Golden, SuiteError};

/// `code-runner-conformance profile`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProfileArgs {
    /// The engine the worker is connected to (`ws://host:port`).
    #[arg(long, value_name = "URL")]
    pub(crate) engine: String,
    /// The worker's function prefix (`<prefix>::run`).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) prefix: String,
    /// The profile's name (default: the prefix).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// The golden directory whose targets name the known features.
    #[arg(long, value_name = "DIR", env = "CODE_RUNNER_CONFORMANCE_GOLDEN")]
    pub(crate) golden: Option<PathBuf>,
}

mod defaults;
mod probe;
use defaults::{CONTRACT_DEFAULTS, SEED_DEFAULTS};

/// The functions a code-runner-compatible worker may publish (after its
/// `<prefix>::`) that the suite knows: the one list the draft and the tests
/// read. Every function a golden case triggers is here.
pub const KNOWN_FUNCTIONS: [&str; 8] = [
    "run",
    "register_function",
    "teardown",
    "list_runtimes",
    "watch",
    "inject-guidance",
    "on-config-change",
    "ui-content",
];

/// What the draft is made from.
#[derive(Debug, Clone)]
pub(crate) struct Observation {
    pub(crate) published: Published,
    pub(crate) envelope: EnvelopeProbe,
    /// Function suffix → its `engine::functions::info` entry.
    pub(crate) entries: Vec<(String, Value)>,
    /// What the probes saw: feature → (value, how).
    pub(crate) probed: probe::Seen,
}

/// Looks at the worker behind `prefix` on a connected client.
pub(crate) async fn observe(client: &IIIClient, prefix: &str) -> Result<Observation, SuiteError> {
    let listed: BTreeSet<String> = published::listed_under(client, prefix)
        .await
        .unwrap_or_default();
    let candidates: Vec<String> = KNOWN_FUNCTIONS
        .iter()
        .map(|f| format!("{prefix}::{f}"))
        .collect();
    let mut seen: BTreeSet<String> = super::env::functions_present(client, &candidates)
        .await
        .unwrap_or_default()
        .into_iter()
        .collect();
    seen.extend(listed.iter().cloned());
    if seen.is_empty() {
        return Err(SuiteError::Environment(
            crate::suite::env::EnvError::Failed(format!(
                "the engine lists no function under {prefix}:: — is the worker connected?"
            )),
        ));
    }
    let known: Vec<String> = KNOWN_FUNCTIONS.iter().map(|f| f.to_string()).collect();
    let published = Published::compare(prefix, &known, &seen);
    let envelope = published::probe_envelope(client, prefix, &published).await;
    let mut entries = Vec::new();
    for f in published.present.iter().chain(&published.extra) {
        let id = format!("{prefix}::{f}");
        if let Ok(v) = client
            .trigger(TriggerRequest {
                function_id: "engine::functions::info".into(),
                payload: json!({ "function_id": id }),
                action: None,
                timeout_ms: Some(10_000),
            })
            .await
        {
            entries.push((f.clone(), v));
        }
    }
    let probed = probe::probe(client, prefix, &published.present, &seen).await;
    Ok(Observation {
        published,
        envelope,
        entries,
        probed,
    })
}

/// A feature's value read off the observation, with how it was seen.
fn observed(o: &Observation, feature: &str) -> Option<(String, String)> {
    let schema = |f: &str, which: &str| {
        o.entries
            .iter()
            .find(|(n, _)| n == f)
            .and_then(|(_, e)| e.get(which).cloned())
            // A schema that names no property (an untyped handler's
            // `{"type":"object"}`) says nothing about fields.
            .filter(|s| !s.is_null() && s.to_string().contains("\"properties\""))
    };
    let prop =
        |f: &str, which: &str, p: &str| schema(f, which).map(|s| find_property(&s, p).is_some());
    let langs = || -> Option<Vec<String>> {
        let s = schema("run", "request_schema")?;
        let lang = find_property(&s, "lang")?;
        let mut out: Vec<String> = enum_values(&s, &lang);
        out.sort();
        (!out.is_empty()).then_some(out)
    };
    let yes_no = |b: bool| if b { "true" } else { "false" }.to_string();
    if feature == "inject_guidance_function" {
        // Published or not is what the listing shows; internal or not, its entry.
        let entry = o.entries.iter().find(|(n, _)| n == "inject-guidance");
        let published = o.published.present.iter().any(|f| f == "inject-guidance");
        let (v, how) = match (published, entry) {
            (false, _) => ("false", "<prefix>::inject-guidance is not published"),
            (true, Some((_, e))) if e.pointer("/metadata/internal") == Some(&Value::Bool(true)) => (
                "internal",
                "<prefix>::inject-guidance is published with metadata.internal (engine::functions::info)",
            ),
            (true, Some(_)) => (
                "public",
                "<prefix>::inject-guidance is published without metadata.internal (engine::functions::info)",
            ),
            (true, None) => return None,
        };
        return Some((v.to_string(), format!("observed: {how}")));
    }
    let v = match feature {
        "error_envelope" => {
            match (o.envelope.envelope != "unknown").then(|| o.envelope.envelope.clone()) {
                Some(v) => v,
                None => return o.probed.get(feature).cloned(),
            }
        }
        "run_result_field" | "keep" | "langs" | "python" | "node" => {
            let from_schema = match feature {
                "run_result_field" => prop("run", "response_schema", "result").map(yes_no),
                "keep" => prop("run", "request_schema", "keep").map(yes_no),
                "langs" => langs().map(|l| format!("[{}]", l.join(", "))),
                "python" => langs().map(|l| yes_no(l.iter().any(|l| l == "python"))),
                _ => langs().map(|l| yes_no(l.iter().any(|l| l == "node"))),
            };
            match from_schema {
                Some(v) => v,
                None => return o.probed.get(feature).cloned(),
            }
        }
        _ => return o.probed.get(feature).cloned(),
    };
    let how = match feature {
        "error_envelope" => format!("observed: {}", o.envelope.evidence),
        _ => "observed in the run schemas (engine::functions::info)".into(),
    };
    Some((v, how))
}

/// The property `name` anywhere in a JSON schema (through `$defs`/`anyOf`).
fn find_property(schema: &Value, name: &str) -> Option<Value> {
    match schema {
        Value::Object(m) => {
            if let Some(p) = m.get("properties").and_then(|p| p.get(name)) {
                return Some(p.clone());
            }
            m.values().find_map(|v| find_property(v, name))
        }
        Value::Array(a) => a.iter().find_map(|v| find_property(v, name)),
        _ => None,
    }
}

/// The string values a property schema admits (`enum`, `const`, `$ref`'d).
fn enum_values(root: &Value, prop: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_enum(root, prop, &mut out, 0);
    out.sort();
    out.dedup();
    out
}

fn collect_enum(root: &Value, v: &Value, out: &mut Vec<String>, depth: u8) {
    if depth > 8 {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(e)) = m.get("enum") {
                out.extend(e.iter().filter_map(Value::as_str).map(str::to_string));
            }
            if let Some(Value::String(c)) = m.get("const") {
                out.push(c.clone());
            }
            if let Some(Value::String(r)) = m.get("$ref") {
                let pointer = r.trim_start_matches('#');
                if let Some(target) = root.pointer(pointer) {
                    collect_enum(root, target, out, depth + 1);
                }
            }
            for k in ["anyOf", "oneOf", "allOf"] {
                if let Some(Value::Array(a)) = m.get(k) {
                    for x in a {
                        collect_enum(root, x, out, depth + 1);
                    }
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_enum(root, x, out, depth + 1)),
        _ => {}
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// The draft, as YAML text that [`Target`] loads.
pub(crate) fn render(
    name: &str,
    prefix: &str,
    url: &str,
    o: &Observation,
    features: &BTreeSet<String>,
) -> String {
    let mut y = String::new();
    let _ = writeln!(
        y,
        "# Draft target profile for the worker publishing {prefix}::* at {url},"
    );
    let _ = writeln!(
        y,
        "# written by `code-runner-conformance profile`. Review every value:"
    );
    for line in [
        "# - `observed:` values were read off the live worker (its listing, its",
        "#   schemas, a few cheap probe calls whose traces it removed again);",
        "# - `seed 000 default` values cannot be seen from outside: they are what",
        "#   seed 000 says, so change them where your worker differs;",
        "# - `suite contract default` values are docs/contract.md's answer where",
        "#   seed 000 leaves one open and nothing can be seen from outside;",
        "# - commented-out values are ones no document settles: state yours to",
        "#   run the `profile`-level cases that need them;",
        "# - `suite floor default` values are the most a case that configures",
        "#   less waits for a floor your worker may raise it to: state 0 if it",
        "#   has none (failing runs end sooner), or yours if it is larger;",
        "# A profile value refines what a `recommended` case checks; it never",
        "# turns one off.",
    ] {
        let _ = writeln!(y, "{line}");
    }
    let _ = writeln!(y, "name: {name}");
    let _ = writeln!(y, "prefix: {prefix}");
    let _ = writeln!(
        y,
        "description: {}",
        quote(&format!("draft for {prefix} (edit me)"))
    );
    let _ = writeln!(y, "sources:");
    let _ = writeln!(y, "  - \"seed 000: sandbox-code-runner README\"");
    let _ = writeln!(y, "functions: [{}]", o.published.present.join(", "));
    if !o.published.extra.is_empty() {
        let _ = writeln!(
            y,
            "# also published (no case of the suite calls it): {}",
            o.published.extra.join(", ")
        );
    }
    let _ = writeln!(y, "profile:");
    let mut open = Vec::new();
    for f in features {
        if target::is_floor(f) {
            continue;
        }
        if let Some((v, how)) = observed(o, f) {
            let _ = writeln!(y, "  {f}:\n    value: {v}\n    source: {}", quote(&how));
        } else if let Some((_, v, why)) = SEED_DEFAULTS.iter().find(|(k, _, _)| k == f) {
            let _ = writeln!(
                y,
                "  {f}:\n    value: {v}\n    source: {}",
                quote(&format!(
                    "seed 000 default (not observed from outside): {why}"
                ))
            );
        } else if let Some((_, v, why)) = CONTRACT_DEFAULTS.iter().find(|(k, _, _)| k == f) {
            let _ = writeln!(
                y,
                "  {f}:\n    value: {v}\n    source: {}",
                quote(&format!(
                    "suite contract default (seed 000 leaves it open; not observable from outside): {why}"
                ))
            );
        } else {
            open.push(f.clone());
        }
    }
    if !open.is_empty() {
        let _ = writeln!(y, "  # ---- left open by the seeds: state yours ----");
        for f in open {
            let _ = writeln!(
                y,
                "  # {f}:\n  #   value: …\n  #   source: \"your worker's documentation\""
            );
        }
    }
    for (f, what, value) in target::FLOORS {
        let _ = writeln!(
            y,
            "  {f}:\n    value: {value}\n    source: {}",
            quote(&format!(
                "suite floor default (not observable from outside): {what}; cases that configure less wait up to this much longer, a worker without a floor passes as soon as it reaps"
            ))
        );
    }
    let _ = writeln!(
        y,
        "# ---- schemas as published (engine::functions::info) ----"
    );
    for (f, e) in &o.entries {
        for which in ["request_schema", "response_schema"] {
            let s = e.get(which).cloned().unwrap_or(Value::Null);
            let _ = writeln!(y, "# {f} {which}: {s}");
        }
    }
    y
}

/// Connects, observes and renders.
pub async fn draft(
    url: &str,
    prefix: &str,
    name: Option<&str>,
    golden: Option<PathBuf>,
) -> Result<String, SuiteError> {
    let golden = Golden::locate(golden)?;
    let targets = Target::load_all(&golden.targets()).map_err(SuiteError::golden_load)?;
    let features = target::known_features(&targets);
    let client = crate::standin::client::connect(url, "code-runner-conformance")
        .await
        .map_err(|e| {
            SuiteError::Environment(crate::suite::env::EnvError::caused(
                format!("cannot connect to {url}"),
                e,
            ))
        })?;
    let o = observe(&client, prefix).await;
    client.shutdown_async().await;
    Ok(render(name.unwrap_or(prefix), prefix, url, &o?, &features))
}

pub(crate) async fn run(args: ProfileArgs) -> ExitCode {
    match draft(
        &args.engine,
        &args.prefix,
        args.name.as_deref(),
        args.golden,
    )
    .await
    {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
