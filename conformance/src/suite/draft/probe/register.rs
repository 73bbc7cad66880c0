//! The registration probes: in namespaces of the probe's own, torn down
//! again, and with one function of its own on the bus, unregistered again.

use std::time::Duration;

use iii_sdk::RegisterFunction;
use serde_json::{json, Value};

use super::{Answer, Prober, CODE_MAX};

/// Whether a registration's `request_format` (seed 001's field, which seed
/// 000 does not have) is what `engine::functions::info` shows callers.
async fn formats(p: &mut Prober<'_>, ns: &str) {
    let id = format!("{ns}::typed");
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let registered = p
        .target(
            "register_function",
            json!({"function_id": id, "lang": "python", "source": handler_source(), "request_format": schema}),
        )
        .await;
    let (value, how) = match registered {
        a if a.refused() => (
            "refused",
            "a registration with request_format is invalid_request",
        ),
        Answer::Ok(_) => match p
            .call("engine::functions::info", json!({"function_id": id}))
            .await
        {
            Answer::Ok(info) if info.get("request_schema") == Some(&schema) => (
                "shown",
                "request_format registered and shown by engine::functions::info",
            ),
            Answer::Ok(_) => (
                "ignored",
                "request_format registered; engine::functions::info shows another schema",
            ),
            _ => return,
        },
        _ => return,
    };
    p.note("handler_formats", value, how);
}

/// The limits of docs/contract.md the probes look for.
const NAMESPACE_MAX: usize = 64;
const NAME_MAX: usize = 256;
const DESCRIPTION_MAX: usize = 4096;
const FUNCTIONS_MAX: usize = 64;

fn handler_source() -> String {
    "def handler(payload):\n    return 1\n".to_string()
}

/// Registrations in two namespaces of its own (torn down again): the
/// check at registration, async handlers, re-registering, the id limits,
/// functions per runtime, ids taken on the bus.
pub(super) async fn registrations(p: &mut Prober<'_>) {
    let tag = format!("{:08x}", rand::random::<u32>());
    let ns = format!("cf-draft-{tag}");
    let register = |id: &str, source: String, description: Option<String>| {
        let mut payload = json!({"function_id": id, "lang": "python", "source": source});
        if let Some(d) = description {
            payload["description"] = json!(d);
        }
        payload
    };
    let no_handler = p
        .target(
            "register_function",
            register(&format!("{ns}::none"), "x = 1\n".into(), None),
        )
        .await;
    match no_handler {
        Answer::Ok(_) => p.note(
            "handler_checked_at_registration",
            "false",
            "a source without handler registered",
        ),
        a if a.refused() => p.note(
            "handler_checked_at_registration",
            "true",
            "a source without handler is invalid_request at registration",
        ),
        _ => {}
    }
    let asynchronous = p
        .target(
            "register_function",
            register(
                &format!("{ns}::async"),
                "async def handler(payload):\n    return 1\n".into(),
                None,
            ),
        )
        .await;
    match asynchronous {
        Answer::Ok(_) => p.note(
            "async_python_handler",
            "accepted",
            "an `async def handler` registered",
        ),
        a if a.refused() => p.note(
            "async_python_handler",
            "refused",
            "an `async def handler` is invalid_request",
        ),
        _ => {}
    }
    formats(p, &ns).await;
    bus_wide(p, &tag, &register).await;
    let _ = p.target("teardown", json!({ "namespace": ns })).await;
    limits(p, &tag, &register).await;
}

/// Whether an id another worker holds on the bus is refused.
async fn bus_wide(
    p: &mut Prober<'_>,
    tag: &str,
    register: &dyn Fn(&str, String, Option<String>) -> Value,
) {
    let id = format!("cf-draft-{tag}-bus::taken");
    let reg = RegisterFunction::new_async(|payload: Value| async move {
        Ok::<Value, iii_sdk::Error>(payload)
    })
    .description("registered by code-runner-conformance profile (another worker on the bus)");
    let f = p.client.register_function(&id, reg);
    let ids = [id.clone()];
    let listed = crate::standin::wait::until(Duration::from_secs(10), || async {
        crate::suite::env::functions_listed(p.client, &ids).await == Some(true)
    })
    .await;
    if listed {
        match p
            .target("register_function", register(&id, handler_source(), None))
            .await
        {
            a if a.refused() => p.note(
                "bus_wide_id_check",
                "true",
                "an id another worker holds on the bus is invalid_request",
            ),
            Answer::Ok(_) => p.note(
                "bus_wide_id_check",
                "false",
                "an id another worker holds on the bus registered",
            ),
            _ => {}
        }
    }
    f.unregister();
    let _ = p
        .target(
            "teardown",
            json!({ "namespace": format!("cf-draft-{tag}-bus") }),
        )
        .await;
}

/// The id, description, source and per-runtime limits of docs/contract.md:
/// one registration at every limit, then one past each.
async fn limits(
    p: &mut Prober<'_>,
    tag: &str,
    register: &dyn Fn(&str, String, Option<String>) -> Value,
) {
    let pad = |head: String, len: usize| format!("{head}{}", "x".repeat(len - head.len()));
    let ns = pad(format!("cf-draft-{tag}-l"), NAMESPACE_MAX);
    let name = pad("f".into(), NAME_MAX);
    let at_limit = p
        .target(
            "register_function",
            register(
                &format!("{ns}::{name}"),
                handler_source(),
                Some("d".repeat(DESCRIPTION_MAX)),
            ),
        )
        .await;
    if let Answer::Ok(_) = at_limit {
        let past: [(&str, usize, Value); 4] = [
            (
                "namespace_max_bytes",
                NAMESPACE_MAX,
                register(
                    &format!("{}::f", pad(format!("cf-draft-{tag}-l"), NAMESPACE_MAX + 1)),
                    handler_source(),
                    None,
                ),
            ),
            (
                "function_name_max_bytes",
                NAME_MAX,
                register(
                    &format!("{ns}::{}", pad("f".into(), NAME_MAX + 1)),
                    handler_source(),
                    None,
                ),
            ),
            (
                "description_max_bytes",
                DESCRIPTION_MAX,
                register(
                    &format!("{ns}::d"),
                    handler_source(),
                    Some("d".repeat(DESCRIPTION_MAX + 1)),
                ),
            ),
            (
                "source_max_bytes",
                CODE_MAX,
                register(
                    &format!("{ns}::s"),
                    pad(handler_source() + "#", CODE_MAX + 1),
                    None,
                ),
            ),
        ];
        for (feature, limit, payload) in past {
            match p.target("register_function", payload).await {
                a if a.refused() => p.note(
                    feature,
                    limit,
                    format!("{limit} bytes register, one more is invalid_request"),
                ),
                Answer::Ok(_) => {
                    p.note(feature, "false", format!("{} bytes registered", limit + 1))
                }
                _ => {}
            }
        }
        let again = p
            .target(
                "register_function",
                register(&format!("{ns}::{name}"), handler_source(), None),
            )
            .await;
        match again {
            a if a.refused() => p.note(
                "reregister",
                "refused",
                "registering a taken id again is invalid_request",
            ),
            Answer::Ok(_) => p.note(
                "reregister",
                "replaces",
                "registering a taken id again succeeded",
            ),
            _ => {}
        }
        per_runtime(p, &ns, register).await;
    }
    let _ = p.target("teardown", json!({ "namespace": ns })).await;
}

/// How many functions one namespace runtime takes: up to one past the
/// documented 64 (the namespace holds one already).
async fn per_runtime(
    p: &mut Prober<'_>,
    ns: &str,
    register: &dyn Fn(&str, String, Option<String>) -> Value,
) {
    for i in 2..=FUNCTIONS_MAX + 1 {
        let answer = p
            .target(
                "register_function",
                register(&format!("{ns}::n{i}"), handler_source(), None),
            )
            .await;
        match answer {
            Answer::Ok(_) if i <= FUNCTIONS_MAX => {}
            Answer::Ok(_) => {
                p.note(
                    "functions_per_runtime_max",
                    "false",
                    format!("{i} functions registered in one namespace"),
                );
                return;
            }
            a if a.refused() && i == FUNCTIONS_MAX + 1 => {
                p.note(
                    "functions_per_runtime_max",
                    FUNCTIONS_MAX,
                    format!("{FUNCTIONS_MAX} functions register in one namespace, one more is invalid_request"),
                );
                return;
            }
            _ => return,
        }
    }
}
