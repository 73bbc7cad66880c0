//! The console UI's view of `list_runtimes` (`ui/src/inventory.ts`) is the
//! worker's: every interface there names exactly the fields of its
//! definition in the golden response schema, optional exactly where the
//! schema does not require them, and every string-literal union lists the
//! schema's enum. A field added on one side and not the other fails here.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// One TypeScript interface: field → (optional, type text).
type Interface = BTreeMap<String, (bool, String)>;

/// The `export interface Name { field?: type; … }` blocks of `ts`.
fn interfaces(ts: &str) -> BTreeMap<String, Interface> {
    let mut out = BTreeMap::new();
    let mut rest = ts;
    while let Some(at) = rest.find("export interface ") {
        let after = &rest[at + "export interface ".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let open = after.find('{').expect("an interface body");
        let close = after[open..].find("\n}").expect("a closed body") + open;
        let mut fields = Interface::new();
        for line in after[open + 1..close].lines() {
            let line = line.trim().trim_end_matches(';');
            if line.is_empty() || line.starts_with("//") || line.starts_with("/*") {
                continue;
            }
            let (key, ty) = line.split_once(':').expect("`field: type`");
            let optional = key.ends_with('?');
            fields.insert(
                key.trim_end_matches('?').trim().to_string(),
                (optional, ty.trim().to_string()),
            );
        }
        out.insert(name, fields);
        rest = &after[close..];
    }
    out
}

/// The string literals of a union type (`"a" | "b"`), if it is one.
fn literals(ty: &str) -> Option<Vec<String>> {
    let parts: Vec<&str> = ty.split('|').map(str::trim).collect();
    parts
        .iter()
        .all(|p| p.starts_with('"') && p.ends_with('"'))
        .then(|| {
            parts
                .iter()
                .map(|p| p.trim_matches('"').to_string())
                .collect()
        })
}

/// Every string an enum (or a oneOf of enums) of `schema` allows.
fn enum_values(schema: &Value, defs: &Value) -> Option<Vec<String>> {
    // A field's own description wraps its `$ref` in an `allOf`.
    let target = schema.get("allOf").and_then(|a| a.get(0)).unwrap_or(schema);
    let s = match target.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs[r.trim_start_matches("#/definitions/")],
        None => schema,
    };
    let mut all: Vec<String> = Vec::new();
    let mut add = |e: &Value| {
        if let Some(list) = e.get("enum").and_then(Value::as_array) {
            all.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
        }
    };
    add(s);
    for alt in s
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        add(alt);
    }
    (!all.is_empty()).then(|| {
        all.sort();
        all
    })
}

#[test]
fn the_uis_inventory_types_are_the_golden_schemas() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ts = std::fs::read_to_string(root.join("ui/src/inventory.ts")).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            root.join("golden/schemas/sandbox-code-runner/list_runtimes.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let response = &schema["response_schema"];
    let defs = &response["definitions"];
    let ifaces = interfaces(&ts);
    for (name, def) in [
        ("Inventory", response),
        ("RuntimeEntry", &defs["RuntimeEntry"]),
    ] {
        let fields = ifaces
            .get(name)
            .unwrap_or_else(|| panic!("ui/src/inventory.ts declares {name}"));
        let props = def["properties"].as_object().expect("properties");
        let required: Vec<&str> = def["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ui: Vec<&String> = fields.keys().collect();
        let golden: Vec<&String> = props.keys().collect();
        assert_eq!(ui, golden, "{name}: the UI's fields against the schema's");
        for (field, (optional, ty)) in fields {
            assert_eq!(
                *optional,
                !required.contains(&field.as_str()),
                "{name}.{field}: optional in the UI exactly when the schema does not require it"
            );
            if let Some(mut lits) = literals(ty) {
                lits.sort();
                assert_eq!(
                    Some(lits),
                    enum_values(&props[field], defs),
                    "{name}.{field}: the UI's literals against the schema's enum"
                );
            }
        }
    }
}

#[test]
fn the_interface_reader_reads_fields_optionality_and_unions() {
    let got = interfaces(
        "export interface A {\n  x: number;\n  y?: \"p\" | \"q\";\n}\nexport interface B {\n  z: string[];\n}\n",
    );
    assert_eq!(got["A"]["x"], (false, "number".to_string()));
    assert!(got["A"]["y"].0);
    assert_eq!(
        literals(&got["A"]["y"].1),
        Some(vec!["p".into(), "q".into()])
    );
    assert_eq!(got["B"].len(), 1);
    assert_eq!(literals("string"), None);
}

/// The UI's ids (`ui/src/ids.ts`) are the worker's (`src/function_ids.rs`).
#[test]
fn the_uis_function_ids_are_the_workers() {
    use sandbox_code_runner::function_ids as ids;
    let ts = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/src/ids.ts"))
        .unwrap();
    for (name, id) in [
        ("RUN", ids::RUN),
        ("REGISTER_FUNCTION", ids::REGISTER_FUNCTION),
        ("TEARDOWN", ids::TEARDOWN),
        ("LIST_RUNTIMES", ids::LIST_RUNTIMES),
        ("WATCH", ids::WATCH),
    ] {
        let line = format!("export const {name} = \"{id}\";");
        assert!(ts.contains(&line), "ui/src/ids.ts lacks `{line}`");
    }
}
