//! The code-value probe: whether a run answers its code's value (`result`),
//! in which forms code runs (node as an async function body, python
//! assigning `result`) beside the ones `runs` saw, and where `result` is
//! capped.

use serde_json::{json, Value};

use super::{Answer, Prober};

/// A second form of `feature` seen beside the one already noted: both, as
/// a list (the target runs code either way).
fn also(p: &mut Prober<'_>, feature: &str, form: &str, how: &str) {
    let value = match p.seen.get(feature) {
        Some((v, _)) if v != form && !v.starts_with('[') => format!("[{v}, {form}]"),
        _ => form.to_string(),
    };
    p.note(feature, value, how);
}

async fn result_of(p: &Prober<'_>, lang: &str, code: &str) -> Option<Value> {
    match p
        .target(
            "run",
            json!({"lang": lang, "code": code, "timeout_ms": 20000}),
        )
        .await
    {
        Answer::Ok(v) => v.get("result").cloned(),
        _ => None,
    }
}

pub(super) async fn forms(p: &mut Prober<'_>, python: bool, node: bool) {
    if python && result_of(p, "python", "result = 7").await == Some(json!(7)) {
        also(
            p,
            "python_code",
            "module_result",
            "`result = 7` answers result 7",
        );
    }
    if !node {
        return;
    }
    if result_of(p, "node", "return 5").await == Some(json!(5)) {
        also(
            p,
            "node_code",
            "function_body",
            "`return 5` answers result 5",
        );
    }
    // Seed 001's cap: a result over 32768 bytes of JSON becomes a marker.
    let over = result_of(p, "node", "return 'x'.repeat(40000)").await;
    let under = result_of(p, "node", "return 'x'.repeat(30000)").await;
    let marked = |v: &Option<Value>| {
        v.as_ref()
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("<omitted: result was"))
    };
    if marked(&over)
        && under
            .as_ref()
            .and_then(Value::as_str)
            .is_some_and(|s| s.len() == 30000)
    {
        p.note(
            "result_cap_bytes",
            "32768",
            "a 40,000-char string result comes back as the omission marker, a 30,000-char one whole (seed 001's 32768)",
        );
    }
}
