//! The field-by-field view of a schema: flattened fields with their types,
//! and what changed between two of them (for `compat`).

use super::*;

/// What the wire says about one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) ty: String,
    pub(crate) required: bool,
    pub(crate) default: Option<String>,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {}",
            self.ty,
            if self.required {
                "required"
            } else {
                "optional"
            }
        )?;
        if let Some(d) = &self.default {
            write!(f, ", default {d}")?;
        }
        Ok(())
    }
}

pub(super) fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut s = schema;
    for _ in 0..16 {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let Some(ptr) = r.strip_prefix('#') else {
            break;
        };
        match root.pointer(ptr) {
            Some(t) => s = t,
            None => break,
        }
    }
    s
}

/// A readable type of a schema: `string`, `"node"|"python" | null`,
/// `integer(uint64, min 0)`, `array<string>`, `any`.
pub(crate) fn type_of(schema: &Value, root: &Value) -> String {
    let s = resolve(schema, root);
    if let Some(list) = s.get("allOf").and_then(Value::as_array) {
        if list.len() == 1 {
            return type_of(&list[0], root);
        }
        return list
            .iter()
            .map(|x| type_of(x, root))
            .collect::<Vec<_>>()
            .join(" & ");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(list) = s.get(key).and_then(Value::as_array) {
            return list
                .iter()
                .map(|x| type_of(x, root))
                .collect::<Vec<_>>()
                .join(" | ");
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("|");
    }
    if let Some(c) = s.get("const") {
        return format!("const {c}");
    }
    let mut extras = Vec::new();
    if let Some(f) = s.get("format").and_then(Value::as_str) {
        extras.push(f.to_string());
    }
    if let Some(m) = s.get("minimum") {
        extras.push(format!("min {}", norm_number(m)));
    }
    if let Some(m) = s.get("maximum") {
        extras.push(format!("max {}", norm_number(m)));
    }
    let suffix = if extras.is_empty() {
        String::new()
    } else {
        format!("({})", extras.join(", "))
    };
    let base = |t: &str| -> String {
        match t {
            "array" => {
                let item = s
                    .get("items")
                    .map(|i| type_of(i, root))
                    .unwrap_or_else(|| "any".into());
                format!("array<{item}>")
            }
            "integer" | "number" => format!("{t}{suffix}"),
            other => other.to_string(),
        }
    };
    match s.get("type") {
        Some(Value::String(t)) => base(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(base)
            .collect::<Vec<_>>()
            .join(" | "),
        _ if s.get("properties").is_some() => "object".into(),
        _ => "any".into(),
    }
}

/// The fields of an object schema, nested objects flattened as `a.b` and
/// array items as `a[]`.
pub(crate) fn fields(schema: &Value) -> BTreeMap<String, Field> {
    let mut out = BTreeMap::new();
    collect_fields(schema, schema, "", &mut out, 0);
    out
}

pub(super) fn collect_fields(
    schema: &Value,
    root: &Value,
    prefix: &str,
    out: &mut BTreeMap<String, Field>,
    depth: usize,
) {
    if depth > 8 {
        return;
    }
    let s = resolve(schema, root);
    let s = match s.get("allOf").and_then(Value::as_array) {
        Some(l) if l.len() == 1 => resolve(&l[0], root),
        _ => s,
    };
    let Some(props) = s.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: BTreeSet<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, p) in props {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        out.insert(
            path.clone(),
            Field {
                ty: type_of(p, root),
                required: required.contains(name.as_str()),
                default: p.get("default").map(|d| d.to_string()),
            },
        );
        let rp = resolve(p, root);
        if rp.get("properties").is_some() {
            collect_fields(rp, root, &path, out, depth + 1);
        }
        if let Some(items) = rp.get("items") {
            let ri = resolve(items, root);
            if ri.get("properties").is_some() {
                collect_fields(ri, root, &format!("{path}[]"), out, depth + 1);
            }
        }
    }
}

/// How one field compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldChange {
    Same,
    Changed,
    OnlyA,
    OnlyB,
}

impl FieldChange {
    pub(super) fn mark(self) -> char {
        match self {
            FieldChange::Same => '=',
            FieldChange::Changed => '~',
            FieldChange::OnlyA => '-',
            FieldChange::OnlyB => '+',
        }
    }
}

/// One field of one side of one function.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldDiff {
    pub field: String,
    pub change: FieldChange,
    pub(crate) a: Option<String>,
    pub(crate) b: Option<String>,
}

/// The diff of one function present in both targets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FunctionDiff {
    pub function: String,
    pub request: Vec<FieldDiff>,
    pub response: Vec<FieldDiff>,
}

/// The whole wire diff.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompatReport {
    pub(crate) a: String,
    pub(crate) b: String,
    pub functions: Vec<FunctionDiff>,
    pub(crate) only_a: Vec<String>,
    pub(crate) only_b: Vec<String>,
}

pub(super) fn diff_fields(a: &Value, b: &Value) -> Vec<FieldDiff> {
    let fa = fields(a);
    let fb = fields(b);
    let names: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    names
        .into_iter()
        .map(|n| {
            let (x, y) = (fa.get(n), fb.get(n));
            let change = match (x, y) {
                (Some(x), Some(y)) if x == y => FieldChange::Same,
                (Some(_), Some(_)) => FieldChange::Changed,
                (Some(_), None) => FieldChange::OnlyA,
                _ => FieldChange::OnlyB,
            };
            FieldDiff {
                field: n.clone(),
                change,
                a: x.map(|f| f.to_string()),
                b: y.map(|f| f.to_string()),
            }
        })
        .collect()
}
