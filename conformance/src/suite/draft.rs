//! `code-runner-conformance profile`: a draft target profile for a live
//! worker, to start a `golden/targets/<name>.yaml` from.
//!
//! What can be seen from outside is filled in from what the worker shows:
//! the functions it publishes under its prefix, their request/response
//! schemas (the languages, `keep`, `result`), and the error envelope it
//! answers in. Everything else is left at seed 000's default, marked as
//! such; values the seeds leave open are written commented out, so their
//! `profile`-level cases stay skipped until the author states them.

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

/// The functions a code-runner-compatible worker may publish (after its
/// `<prefix>::`): the one list the draft and the tests read.
pub const KNOWN_FUNCTIONS: [&str; 6] = [
    "run",
    "register_function",
    "teardown",
    "inject-guidance",
    "on-config-change",
    "ui-content",
];

/// Seed 000's answer for features it settles: `(feature, value, sentence)`.
const SEED_DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "network",
        "true",
        "seed 000 Running code: every VM has outbound network",
    ),
    (
        "package_install",
        "true",
        "seed 000 Running code: npm install / pip install work in every runtime",
    ),
    (
        "real_filesystem",
        "true",
        "seed 000: a real OS per call; files survive on a kept runtime",
    ),
    (
        "globals_persist_on_keep",
        "false",
        "seed 000 Running code: variables do not survive between runs",
    ),
    (
        "handler_globals_persist",
        "false",
        "seed 000: each call runs in a fresh interpreter process",
    ),
    (
        "sandbox_daemon",
        "true",
        "seed 000: every execution is delegated to the iii-sandbox daemon",
    ),
    (
        "guest_sdk",
        "real_sdk",
        "seed 000 The iii global: the real iii-sdk client",
    ),
    (
        "guest_register_function",
        "true",
        "seed 000 The iii global: the full SDK surface",
    ),
    (
        "guest_python_iii",
        "true",
        "seed 000 The iii global: python runtimes pip install iii-sdk once",
    ),
    (
        "self_call_stalls",
        "true",
        "seed 000 The iii global: self-calls stall",
    ),
    (
        "one_runtime_per_namespace_lang",
        "true",
        "seed 000: one persistent runtime per namespace and language",
    ),
    (
        "teardown_by_namespace",
        "true",
        "seed 000 Teardown and expiry",
    ),
    ("capacity", "true", "seed 000 Errors: capacity"),
    (
        "non_json_return_is_handler_error",
        "true",
        "seed 000 Errors: handler_error",
    ),
    (
        "resource_exhausted",
        "false",
        "seed 000 Errors: no resource_exhausted code",
    ),
    (
        "reregister",
        "refused",
        "seed 000 Errors: invalid_request — id already taken",
    ),
    (
        "idle_ttl_floor_secs",
        "0",
        "seed 000 documents no floor on idle_ttl_secs",
    ),
    (
        "inject_guidance_hook",
        "true",
        "seed 000 Configuration: inject_guidance (ON by default)",
    ),
    (
        "namespace_charset",
        "\"[a-z0-9._-]\"",
        "seed 000 names namespace violations; the charset is the documented workers'",
    ),
    (
        "python_code",
        "main_script",
        "seed 000: Python code is a script",
    ),
    (
        "node_code",
        "es_module",
        "seed 000: Node code is a module (top-level await)",
    ),
];

/// What the draft is made from.
#[derive(Debug, Clone)]
pub(crate) struct Observation {
    pub(crate) published: Published,
    pub(crate) envelope: EnvelopeProbe,
    /// Function suffix → its `engine::functions::info` entry.
    pub(crate) entries: Vec<(String, Value)>,
}

/// Looks at the worker behind `prefix` on a connected client.
pub(crate) async fn observe(client: &IIIClient, prefix: &str) -> Result<Observation, SuiteError> {
    let listed = published::listed_under(client, prefix)
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
    seen.extend(listed);
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
    Ok(Observation {
        published,
        envelope,
        entries,
    })
}

/// A feature's value read off the observation, with how it was seen.
fn observed(o: &Observation, feature: &str) -> Option<(String, String)> {
    let schema = |f: &str, which: &str| {
        o.entries
            .iter()
            .find(|(n, _)| n == f)
            .and_then(|(_, e)| e.get(which).cloned())
            .filter(|s| !s.is_null())
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
    let v = match feature {
        "error_envelope" => {
            (o.envelope.envelope != "unknown").then(|| o.envelope.envelope.clone())?
        }
        "run_result_field" => yes_no(prop("run", "response_schema", "result")?),
        "keep" => yes_no(prop("run", "request_schema", "keep")?),
        "langs" => format!("[{}]", langs()?.join(", ")),
        "python" => yes_no(langs()?.iter().any(|l| l == "python")),
        "node" => yes_no(langs()?.iter().any(|l| l == "node")),
        "inject_guidance_hook" => {
            yes_no(o.published.present.iter().any(|f| f == "inject-guidance"))
        }
        _ => return None,
    };
    let how = match feature {
        "error_envelope" => format!("observed: {}", o.envelope.evidence),
        "inject_guidance_hook" => "observed: whether <prefix>::inject-guidance is published".into(),
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
    let _ = writeln!(y, "# - `observed:` values were read off the live worker;");
    let _ = writeln!(
        y,
        "# - `seed 000 default` values cannot be seen from outside: they are"
    );
    let _ = writeln!(
        y,
        "#   what seed 000 says, so change them where your worker differs;"
    );
    let _ = writeln!(
        y,
        "# - commented-out values are ones the seeds leave open: state yours to"
    );
    let _ = writeln!(y, "#   run the `profile`-level cases that need them.");
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
            "# also published, not a function the suite knows: {}",
            o.published.extra.join(", ")
        );
    }
    let _ = writeln!(y, "profile:");
    let mut open = Vec::new();
    for f in features {
        if let Some((v, how)) = observed(o, f) {
            let _ = writeln!(y, "  {f}:\n    value: {v}\n    source: {}", quote(&how));
        } else if let Some((_, v, why)) = SEED_DEFAULTS.iter().find(|(k, _, _)| k == f) {
            let _ = writeln!(
                y,
                "  {f}:\n    value: {v}\n    source: {}",
                quote(&format!(
                    "seed 000 default (not observable from outside): {why}"
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
