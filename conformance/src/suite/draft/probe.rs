//! What `profile` learns by calling the live worker. Every probe is a
//! cheap call whose traces are gone when the probe ends: one-shot runs,
//! one kept runtime and two namespaces it tears down itself, one function
//! of its own on the bus it unregisters. A probe whose call fails for
//! another reason (no daemon, a timeout) observes nothing, and the draft
//! falls back to seed 000's answer.

use std::collections::{BTreeMap, BTreeSet};

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::{json, Value};

use crate::suite::errors::{classify, Observed};

mod concurrency;
mod forms;
mod inventory;
mod output;
mod register;
use register::registrations;

/// Observed profile values: feature → (its YAML text, how it was seen).
pub(crate) type Seen = BTreeMap<String, (String, String)>;

/// How long one probe call may take (a 1 MiB request, a cold VM).
const CALL_TIMEOUT_MS: u64 = 90_000;
/// How many bytes the output-cap probe prints: under the daemon's 1 MiB cut.
const CAP_PROBE_BYTES: usize = 300_000;
/// The code and source size limit of docs/contract.md.
const CODE_MAX: usize = 1_048_576;

/// What one call came back with.
enum Answer {
    Ok(Value),
    /// A target error, by its short code (`invalid_request`).
    Target(String),
    /// Anything else: the probe learns nothing from it.
    Other,
}

impl Answer {
    fn refused(&self) -> bool {
        matches!(self, Answer::Target(c) if c == "invalid_request")
    }
}

struct Prober<'a> {
    client: &'a IIIClient,
    prefix: &'a str,
    seen: Seen,
}

impl Prober<'_> {
    async fn call(&self, function_id: &str, payload: Value) -> Answer {
        let r = self
            .client
            .trigger(TriggerRequest {
                function_id: function_id.to_string(),
                payload,
                action: None,
                timeout_ms: Some(CALL_TIMEOUT_MS),
            })
            .await;
        match r {
            Ok(v) => Answer::Ok(v),
            Err(iii_sdk::Error::Remote { code, message, .. }) => {
                match classify(self.prefix, &code, &message) {
                    Observed::Target { code, .. } => Answer::Target(code),
                    _ => Answer::Other,
                }
            }
            Err(_) => Answer::Other,
        }
    }

    async fn target(&self, suffix: &str, payload: Value) -> Answer {
        self.call(&format!("{}::{suffix}", self.prefix), payload)
            .await
    }

    fn note(&mut self, feature: &str, value: impl ToString, how: impl Into<String>) {
        self.seen.insert(
            feature.to_string(),
            (value.to_string(), format!("observed: {}", how.into())),
        );
    }

    fn yes_no(b: bool) -> &'static str {
        if b {
            "true"
        } else {
            "false"
        }
    }
}

/// Probes the worker behind `prefix`: `present` are the known functions it
/// publishes, `listed` every id the engine lists under the prefix.
pub(crate) async fn probe(
    client: &IIIClient,
    prefix: &str,
    present: &[String],
    listed: &BTreeSet<String>,
) -> Seen {
    let mut p = Prober {
        client,
        prefix,
        seen: Seen::new(),
    };
    surfaces(&mut p, present, listed).await;
    let has = |f: &str| present.iter().any(|x| x == f);
    if has("run") {
        runs(&mut p).await;
        kept(&mut p).await;
        python_sdk_home(&mut p).await;
    }
    if has("register_function") {
        registrations(&mut p).await;
        concurrency::concurrency(&mut p).await;
        if has("list_runtimes") {
            inventory::inventory(&mut p).await;
        }
    }
    p.seen
}

/// What the listing shows: the guest listener's functions, the internal
/// stats, the lifecycle trigger type.
async fn surfaces(p: &mut Prober<'_>, present: &[String], listed: &BTreeSet<String>) {
    let prefix = p.prefix.to_string();
    let has = |s: &str| listed.contains(&format!("{prefix}::{s}"));
    let (auth, middleware) = (has("guest-auth"), has("guest-middleware"));
    p.note(
        "guest_listener",
        Prober::yes_no(auth),
        format!(
            "{prefix}::guest-auth (a guest listener's auth function) is {}published",
            if auth { "" } else { "not " }
        ),
    );
    p.note(
        "guest_tenancy",
        Prober::yes_no(auth && middleware),
        format!(
            "{prefix}::guest-middleware (a guest listener's middleware) is {}published",
            if middleware { "" } else { "not " }
        ),
    );
    // `op_stats` is this worker's stats: its per-run SDK install counters.
    let stats = match has("stats") {
        false => None,
        true => match p.call(&format!("{prefix}::stats"), json!({})).await {
            Answer::Ok(v) => Some(
                v.pointer("/run/sdk_pip_installs").is_some()
                    && v.pointer("/python_sdk/pip_installs").is_some(),
            ),
            _ => Some(false),
        },
    };
    p.note(
        "op_stats",
        Prober::yes_no(stats == Some(true)),
        match stats {
            None => format!("{prefix}::stats is not published"),
            Some(true) => format!(
                "{prefix}::stats answers run.sdk_pip_installs and python_sdk.pip_installs"
            ),
            Some(false) => format!(
                "{prefix}::stats is published but answers no run.sdk_pip_installs and python_sdk.pip_installs"
            ),
        },
    );
    let inventory = present.iter().any(|f| f == "list_runtimes");
    p.note(
        "list_runtimes",
        Prober::yes_no(inventory),
        format!(
            "{prefix}::list_runtimes is {}published",
            if inventory { "" } else { "not " }
        ),
    );
    let watch = present.iter().any(|f| f == "watch");
    p.note(
        "watch",
        Prober::yes_no(watch),
        format!(
            "{prefix}::watch is {}published",
            if watch { "" } else { "not " }
        ),
    );
    if present.iter().any(|f| f == "inject-guidance") {
        p.note(
            "inject_guidance_hook",
            "true",
            format!("{prefix}::inject-guidance is published"),
        );
    }
    if let Answer::Ok(v) = p
        .call(
            "engine::triggers::list",
            json!({ "include_internal": true }),
        )
        .await
    {
        let event = format!("{prefix}::event");
        let declared = v
            .get("triggers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|t| t.get("id") == Some(&json!(event))));
        p.note(
            "lifecycle_events",
            Prober::yes_no(declared),
            format!(
                "trigger type {event} is {}declared (engine::triggers::list)",
                if declared { "" } else { "not " }
            ),
        );
    }
}

/// One-shot runs: the languages, `result`, the output cap, a zero timeout,
/// the code size limit.
async fn runs(p: &mut Prober<'_>) {
    let py = p
        .target("run", json!({"lang": "python", "code": "print(__name__)"}))
        .await;
    let python = match &py {
        Answer::Ok(v) => {
            if v.get("stdout") == Some(&json!("__main__\n")) {
                p.note("python_code", "main_script", "python code runs as __main__");
            }
            p.note(
                "run_result_field",
                Prober::yes_no(v.get("result").is_some()),
                "whether a python run's response carries `result`",
            );
            response_fields(p, v);
            output::output_stream(p).await;
            Some(true)
        }
        a if a.refused() => Some(false),
        _ => None,
    };
    let js = p
        .target(
            "run",
            json!({"lang": "node", "code": "console.log(typeof (await Promise.resolve(1)))"}),
        )
        .await;
    let node = match &js {
        Answer::Ok(v) => {
            if v.get("stdout") == Some(&json!("number\n")) {
                p.note("node_code", "es_module", "node code takes top-level await");
            }
            Some(true)
        }
        a if a.refused() => Some(false),
        _ => None,
    };
    if let (Some(py), Some(js)) = (python, node) {
        let langs: Vec<&str> = [("node", js), ("python", py)]
            .iter()
            .filter(|(_, on)| *on)
            .map(|(l, _)| *l)
            .collect();
        let how = "a one-shot run in each language";
        p.note("python", Prober::yes_no(py), how);
        p.note("node", Prober::yes_no(js), how);
        p.note("langs", format!("[{}]", langs.join(", ")), how);
    }
    forms::forms(p, python == Some(true), node == Some(true)).await;
    if python != Some(true) {
        return;
    }
    output_cap(p).await;
    let zero = p
        .target(
            "run",
            json!({"lang": "python", "code": "print(1)", "timeout_ms": 0}),
        )
        .await;
    match zero {
        Answer::Ok(_) => p.note(
            "timeout_zero_is_default",
            "true",
            "a run with timeout_ms 0 ran",
        ),
        Answer::Target(_) => p.note(
            "timeout_zero_is_default",
            "false",
            "a run with timeout_ms 0 was an error",
        ),
        Answer::Other => {}
    }
    let over = p
        .target(
            "run",
            json!({"lang": "python", "code": "#".repeat(CODE_MAX + 1)}),
        )
        .await;
    if over.refused() {
        let at = p
            .target(
                "run",
                json!({"lang": "python", "code": "#".repeat(CODE_MAX)}),
            )
            .await;
        if matches!(at, Answer::Ok(_)) {
            p.note(
                "code_max_bytes",
                CODE_MAX,
                "1 MiB of code runs, one byte more is invalid_request",
            );
        }
    } else if matches!(over, Answer::Ok(_)) {
        p.note("code_max_bytes", "false", "1 MiB + 1 byte of code ran");
    }
    if matches!(over, Answer::Ok(_) | Answer::Target(_)) {
        p.note(
            "request_limits",
            Prober::yes_no(over.refused()),
            "whether 1 MiB + 1 byte of code is refused",
        );
    }
}

/// Whether a one-shot run answers exactly seed 000's fields.
fn response_fields(p: &mut Prober<'_>, v: &Value) {
    const SEED: [&str; 5] = ["stdout", "stderr", "exit_code", "success", "duration_ms"];
    let Some(m) = v.as_object() else { return };
    let extra: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !SEED.contains(k))
        .collect();
    let missing: Vec<&str> = SEED.into_iter().filter(|k| !m.contains_key(*k)).collect();
    let how = if extra.is_empty() && missing.is_empty() {
        "a one-shot run answers exactly stdout, stderr, exit_code, success, duration_ms".into()
    } else {
        format!(
            "a one-shot run answers{}{}",
            if extra.is_empty() {
                String::new()
            } else {
                format!(" also {}", extra.join(", "))
            },
            if missing.is_empty() {
                String::new()
            } else {
                format!(" without {}", missing.join(", "))
            }
        )
    };
    p.note(
        "run_response_exact",
        Prober::yes_no(extra.is_empty() && missing.is_empty()),
        how,
    );
}

/// Where python runs get the SDK from: a run that names `iii` (so a worker
/// that installs it for such runs has done so) looks for the module on
/// the interpreter's own path, its site-packages. Seed 000's pip install
/// puts it there, in the image's rootfs that every sandbox of the image
/// shares; a worker that keeps it in a private directory does not.
async fn python_sdk_home(p: &mut Prober<'_>) {
    let code = "import importlib.util\n# the iii SDK, where python finds it by itself\nprint(importlib.util.find_spec('iii') is not None)";
    let answer = p
        .target(
            "run",
            json!({"lang": "python", "code": code, "timeout_ms": 30000}),
        )
        .await;
    let Answer::Ok(v) = answer else { return };
    match v.get("stdout").and_then(Value::as_str) {
        Some("True\n") => p.note(
            "guest_sdk_private",
            "false",
            "a python run naming iii finds the SDK on the interpreter's own path (its site-packages)",
        ),
        Some("False\n") => p.note(
            "guest_sdk_private",
            "true",
            "a python run naming iii finds no SDK on the interpreter's own path: the worker keeps it elsewhere",
        ),
        _ => {}
    }
}

/// The output cap: 300 KB of stdout, read back. The documented layout
/// (head, one marker line, tail) gives the budget exactly.
async fn output_cap(p: &mut Prober<'_>) {
    let code = format!("import sys\nsys.stdout.write('x' * {CAP_PROBE_BYTES})");
    let Answer::Ok(v) = p
        .target("run", json!({"lang": "python", "code": code}))
        .await
    else {
        return;
    };
    let Some(out) = v.get("stdout").and_then(Value::as_str) else {
        return;
    };
    if out.len() == CAP_PROBE_BYTES {
        p.note(
            "stream_cap_bytes",
            "false",
            format!("{CAP_PROBE_BYTES} bytes of stdout came back whole"),
        );
        return;
    }
    let marker = regex::Regex::new(r"\n\[…stdout truncated: was ~\d+ KB; middle omitted\]\n")
        .expect("a valid regex");
    match marker.find(out) {
        Some(m) => {
            let budget = m.start() + (out.len() - m.end());
            p.note(
                "stream_cap_bytes",
                budget,
                format!("{CAP_PROBE_BYTES} bytes of stdout came back as head + marker + tail of {budget} bytes"),
            );
        }
        None => p.note(
            "stream_cap_bytes",
            out.len(),
            format!(
                "{CAP_PROBE_BYTES} bytes of stdout came back as {} bytes without the documented marker",
                out.len()
            ),
        ),
    }
}

/// A kept runtime (torn down again): `keep`, the runtime id's format,
/// whether its VM carries a name; and a failing keep run.
async fn kept(p: &mut Prober<'_>) {
    let marker = format!("/tmp/cf-draft-{}", uuid::Uuid::new_v4());
    let code = format!("open('{marker}', 'w').write('x')");
    let answer = p
        .target("run", json!({"lang": "python", "code": code, "keep": true}))
        .await;
    let Answer::Ok(v) = answer else { return };
    let Some(rt) = v
        .get("runtime_id")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        p.note("keep", "false", "a keep run answered no runtime_id");
        return;
    };
    p.note("keep", "true", "a keep run answered a runtime_id");
    let uuid_v4 = regex::Regex::new(
        r"^rt-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
    )
    .expect("a valid regex");
    let format = if uuid_v4.is_match(&rt) {
        "rt-uuid-v4"
    } else {
        "other"
    };
    p.note("runtime_id_format", format, "a kept run's runtime_id");
    if let Some(name) = vm_name(p, &marker).await {
        p.note(
            "vm_ownership",
            Prober::yes_no(!name.is_empty()),
            if name.is_empty() {
                "a kept runtime's VM has no name (sandbox::list): nothing marks it as the worker's"
            } else {
                "a kept runtime's VM is named (sandbox::list)"
            },
        );
    }
    let _ = p.target("teardown", json!({ "runtime_id": rt })).await;
    session(p).await;
    let failed = p
        .target(
            "run",
            json!({"lang": "python", "code": "import sys\nsys.exit(3)", "keep": true}),
        )
        .await;
    if let Answer::Ok(v) = failed {
        match v.get("runtime_id").and_then(Value::as_str) {
            Some(rt) => {
                p.note(
                    "failed_keep_returns_runtime_id",
                    "true",
                    "a failing keep run answered a runtime_id",
                );
                let _ = p.target("teardown", json!({ "runtime_id": rt })).await;
            }
            None => p.note(
                "failed_keep_returns_runtime_id",
                "false",
                "a failing keep run answered no runtime_id",
            ),
        }
    }
}

/// `sessions`: a kept run that asks for one (`session: true`) answers
/// which interpreter it ran in, and the next run into it sees its globals.
async fn session(p: &mut Prober<'_>) {
    let first = p
        .target(
            "run",
            json!({"lang": "python", "code": "x = 41", "keep": true, "session": true}),
        )
        .await;
    let Answer::Ok(v) = first else {
        p.note(
            "sessions",
            "false",
            "a keep run asking for a session was refused",
        );
        return;
    };
    let Some(rt) = v.get("runtime_id").and_then(Value::as_str) else {
        return;
    };
    let rt = rt.to_string();
    let next = p
        .target("run", json!({"runtime_id": rt, "code": "print(x)"}))
        .await;
    let _ = p.target("teardown", json!({ "runtime_id": rt })).await;
    let said = v.get("session").and_then(Value::as_str) == Some("new");
    let kept =
        matches!(&next, Answer::Ok(n) if n.get("stdout").and_then(Value::as_str) == Some("41\n"));
    let (value, how) = match (said, kept) {
        (true, true) => ("true", "a kept run with session: true answered session \"new\", and the next run saw its globals"),
        (false, true) => ("false", "the next run saw the kept run's globals, but the answer names no session (globals_persist_on_keep)"),
        _ => ("false", "a kept run with session: true kept no globals for the next run"),
    };
    p.note("sessions", value, how);
}

/// The name of the live sandbox holding `file`, through the daemon.
async fn vm_name(p: &Prober<'_>, file: &str) -> Option<String> {
    let Answer::Ok(list) = p.call("sandbox::list", json!({})).await else {
        return None;
    };
    for s in list.get("sandboxes")?.as_array()? {
        let id = s.get("sandbox_id")?.as_str()?;
        let read = p
            .call("sandbox::fs::read", json!({"sandbox_id": id, "path": file}))
            .await;
        if matches!(read, Answer::Ok(_)) {
            return Some(
                s.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    None
}
