//! The inventory probe: one function registered in a namespace of the
//! probe's own (torn down again), then `<prefix>::list_runtimes`, read for
//! its shape — under which field a namespace runtime lists the function ids
//! it serves, and whether the answer is this project's inventory.

use serde_json::{json, Value};

use super::{Answer, Prober};

/// The top-level fields of sandbox-code-runner's inventory (issue 13).
const OUR_TOP: [&str; 5] = ["generated_at_ms", "runtimes", "pool", "totals", "vm_check"];
/// The fields of one of its entries.
const OUR_ENTRY: [&str; 6] = ["handle", "kind", "lang", "namespace", "functions", "vm"];

pub(super) async fn inventory(p: &mut Prober<'_>) {
    let ns = format!("cf-draft-{:08x}-inv", rand::random::<u32>());
    let id = format!("{ns}::listed");
    let registered = p
        .target(
            "register_function",
            json!({"function_id": id, "lang": "python", "source": "def handler(payload):\n    return 1\n"}),
        )
        .await;
    if let Answer::Ok(_) = registered {
        if let Answer::Ok(list) = p.target("list_runtimes", json!({})).await {
            read_shape(p, &list, &id);
        }
    }
    let _ = p.target("teardown", json!({ "namespace": ns })).await;
}

fn read_shape(p: &mut Prober<'_>, list: &Value, id: &str) {
    let Some((field, entry)) = functions_field(list, id) else {
        return;
    };
    if is_plain_name(&field) {
        p.note(
            "list_runtimes_functions_field",
            &field,
            format!("list_runtimes lists a namespace runtime's function ids under `{field}`"),
        );
    }
    let ours = OUR_TOP.iter().all(|k| list.get(k).is_some())
        && OUR_ENTRY.iter().all(|k| entry.get(k).is_some())
        && entry.get("kind") == Some(&json!("namespace"));
    p.note(
        "list_runtimes_shape",
        if ours { "sandbox-code-runner" } else { "other" },
        if ours {
            "list_runtimes answers sandbox-code-runner's inventory (generated_at_ms, runtimes[] of handle/kind/lang/namespace/functions/vm, pool, totals, vm_check)".to_string()
        } else {
            "list_runtimes answers another shape than sandbox-code-runner's inventory".to_string()
        },
    );
}

/// The key, anywhere in `v`, of an array holding the string `id`, and the
/// object holding that key.
fn functions_field<'a>(v: &'a Value, id: &str) -> Option<(String, &'a Value)> {
    match v {
        Value::Object(m) => {
            let direct = m.iter().find(|(_, x)| {
                x.as_array()
                    .is_some_and(|a| a.iter().any(|e| e.as_str() == Some(id)))
            });
            if let Some((k, _)) = direct {
                return Some((k.clone(), v));
            }
            m.values().find_map(|x| functions_field(x, id))
        }
        Value::Array(a) => a.iter().find_map(|x| functions_field(x, id)),
        _ => None,
    }
}

/// A field name the draft can write as a bare YAML value.
fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_field_is_found_wherever_the_entry_sits() {
        let ours = json!({"runtimes": [{"kind": "kept", "functions": []},
                                       {"kind": "namespace", "functions": ["a::f"]}]});
        let (field, entry) = functions_field(&ours, "a::f").expect("found");
        assert_eq!(field, "functions");
        assert_eq!(entry["kind"], "namespace");
        let theirs =
            json!({"namespaces": {"a::": {"registered_functions": ["a::f"], "vm_gone": false}}});
        assert_eq!(
            functions_field(&theirs, "a::f").map(|(f, _)| f).as_deref(),
            Some("registered_functions")
        );
        assert!(functions_field(&theirs, "a::g").is_none());
        assert!(is_plain_name("registered_functions") && !is_plain_name("a b"));
    }
}
