//! Schema snapshots: normalization, comparison, and the field-by-field wire
//! diff between two targets (`compat`).
//!
//! A golden schema file (`golden/schemas/<target>/<function>.json`) has the
//! shape of one entry of a published API reference:
//! `{"name", "description", "metadata", "request_schema", "response_schema"}`.
//! Only the two schemas take part in comparisons, after [`normalize`]: keys
//! sorted, `description` / `title` / `$schema` stripped where they are schema
//! keywords (a *property* called `description` stays), integral floats
//! written as integers (`0.0` == `0`).

use super::load_error::LoadError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

mod fields;
pub use fields::*;

/// Keywords dropped before comparing: documentation, not wire.
pub(crate) const STRIPPED: &[&str] = &["description", "title", "$schema"];

const SCHEMA_VALUED: &[&str] = &[
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
];
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "definitions",
    "$defs",
    "dependentSchemas",
];

fn norm_number(v: &Value) -> Value {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                if f < 0.0 {
                    Value::from(f as i64)
                } else {
                    Value::from(f as u64)
                }
            }
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(norm_number).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), norm_number(x)))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Normalizes one schema (see the module docs).
pub fn normalize(schema: &Value) -> Value {
    let Value::Object(m) = schema else {
        return norm_number(schema);
    };
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for (k, v) in m {
        if STRIPPED.contains(&k.as_str()) {
            continue;
        }
        let nv = if SCHEMA_VALUED.contains(&k.as_str()) || SCHEMA_LISTS.contains(&k.as_str()) {
            match v {
                Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
                other => normalize(other),
            }
        } else if SCHEMA_MAPS.contains(&k.as_str()) {
            match v {
                Value::Object(props) => Value::Object(
                    props
                        .iter()
                        .map(|(name, s)| (name.clone(), normalize(s)))
                        .collect::<BTreeMap<_, _>>()
                        .into_iter()
                        .collect(),
                ),
                other => norm_number(other),
            }
        } else {
            norm_number(v)
        };
        out.insert(k.clone(), nv);
    }
    Value::Object(out.into_iter().collect::<Map<_, _>>())
}

/// Paths where two normalized values differ, with both sides.
pub fn differences(golden: &Value, live: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at(golden, live, "", &mut out);
    out
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(110).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

fn diff_at(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff_at(u, v, &p, out),
                    (Some(u), None) => out.push(format!("{p}: golden {}, live absent", short(u))),
                    (None, Some(v)) => out.push(format!("{p}: golden absent, live {}", short(v))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                diff_at(u, v, &format!("{path}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!(
            "{}: golden {}, live {}",
            if path.is_empty() { "/" } else { path },
            short(a),
            short(b)
        )),
    }
}

/// A golden or live function entry.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSchemas {
    pub request: Value,
    pub response: Value,
}

impl FunctionSchemas {
    /// From an API-reference entry or an `engine::functions::info` answer.
    pub fn from_entry(entry: &Value) -> FunctionSchemas {
        FunctionSchemas {
            request: entry.get("request_schema").cloned().unwrap_or(Value::Null),
            response: entry.get("response_schema").cloned().unwrap_or(Value::Null),
        }
    }

    pub(crate) fn normalized(&self) -> Value {
        serde_json::json!({
            "request_schema": normalize(&self.request),
            "response_schema": normalize(&self.response),
        })
    }
}

/// The golden file of one function.
pub(crate) fn golden_path(schemas_dir: &Path, target: &str, function: &str) -> PathBuf {
    schemas_dir.join(target).join(format!("{function}.json"))
}

/// Reads one golden entry.
pub(crate) fn load_golden(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| LoadError::Invalid {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Every golden entry of a target: function suffix → entry.
pub fn load_target(schemas_dir: &Path, target: &str) -> Result<BTreeMap<String, Value>, LoadError> {
    let dir = schemas_dir.join(target);
    let rd = std::fs::read_dir(&dir).map_err(|source| LoadError::Read {
        path: dir.display().to_string(),
        source,
    })?;
    let mut out = BTreeMap::new();
    for e in rd.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        out.insert(stem.to_string(), load_golden(&p)?);
    }
    Ok(out)
}

/// Writes a golden entry with sorted keys, as `run --bless-schemas` does.
pub(crate) fn write_golden(path: &Path, entry: &Value) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let sorted = sort_keys(entry);
    let mut text = serde_json::to_string_pretty(&sorted).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(path, text)
}

/// Deep key sort (whatever serde_json's map order is in this build).
pub(crate) fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, Value> =
                m.iter().map(|(k, x)| (k, sort_keys(x))).collect();
            Value::Object(sorted.into_iter().map(|(k, x)| (k.clone(), x)).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

/// Compares two targets' golden entries (function suffix → entry).
pub(crate) fn compat(
    a_name: &str,
    a: &BTreeMap<String, Value>,
    b_name: &str,
    b: &BTreeMap<String, Value>,
) -> CompatReport {
    let mut functions = Vec::new();
    for (f, ea) in a {
        if let Some(eb) = b.get(f) {
            let sa = FunctionSchemas::from_entry(ea);
            let sb = FunctionSchemas::from_entry(eb);
            functions.push(FunctionDiff {
                function: f.clone(),
                request: diff_fields(&sa.request, &sb.request),
                response: diff_fields(&sa.response, &sb.response),
            });
        }
    }
    CompatReport {
        a: a_name.to_string(),
        b: b_name.to_string(),
        functions,
        only_a: a.keys().filter(|k| !b.contains_key(*k)).cloned().collect(),
        only_b: b.keys().filter(|k| !a.contains_key(*k)).cloned().collect(),
    }
}

impl CompatReport {
    /// Count of (same, changed, only_a, only_b) fields.
    pub(crate) fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for f in &self.functions {
            for d in f.request.iter().chain(&f.response) {
                match d.change {
                    FieldChange::Same => c.0 += 1,
                    FieldChange::Changed => c.1 += 1,
                    FieldChange::OnlyA => c.2 += 1,
                    FieldChange::OnlyB => c.3 += 1,
                }
            }
        }
        c
    }

    /// Whether a caller written against `a` works unchanged against `b`:
    /// no field changed, nothing required by `b` that `a` lacks, and no
    /// response field `a` sends that `b` drops.
    pub(crate) fn breaking(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.functions {
            for d in &f.request {
                match d.change {
                    FieldChange::Changed => {
                        out.push(format!("{} request.{} differs", f.function, d.field))
                    }
                    FieldChange::OnlyB
                        if d.b.as_deref().is_some_and(|s| s.contains(", required")) =>
                    {
                        out.push(format!(
                            "{} request.{} is required by {} only",
                            f.function, d.field, self.b
                        ))
                    }
                    _ => {}
                }
            }
            for d in &f.response {
                match d.change {
                    FieldChange::Changed => {
                        out.push(format!("{} response.{} differs", f.function, d.field))
                    }
                    FieldChange::OnlyA => out.push(format!(
                        "{} response.{} is sent by {} only",
                        f.function, d.field, self.a
                    )),
                    _ => {}
                }
            }
        }
        out
    }

    /// The human report `compat` prints.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "wire diff: {} vs {}  (= same, ~ differs, - only in {}, + only in {})",
            self.a, self.b, self.a, self.b
        );
        for f in &self.functions {
            for (side, diffs) in [("request", &f.request), ("response", &f.response)] {
                let _ = writeln!(s, "\n{} {}", f.function, side);
                let width = diffs.iter().map(|d| d.field.len()).max().unwrap_or(0);
                for d in diffs.iter() {
                    match d.change {
                        FieldChange::Same | FieldChange::OnlyA => {
                            let _ = writeln!(
                                s,
                                "  {} {:width$}  {}",
                                d.change.mark(),
                                d.field,
                                d.a.as_deref().unwrap_or("")
                            );
                        }
                        FieldChange::OnlyB => {
                            let _ = writeln!(
                                s,
                                "  {} {:width$}  {}",
                                d.change.mark(),
                                d.field,
                                d.b.as_deref().unwrap_or("")
                            );
                        }
                        FieldChange::Changed => {
                            let _ = writeln!(
                                s,
                                "  {} {:width$}  {}: {}",
                                d.change.mark(),
                                d.field,
                                self.a,
                                d.a.as_deref().unwrap_or("")
                            );
                            let _ = writeln!(
                                s,
                                "    {:width$}  {}: {}",
                                "",
                                self.b,
                                d.b.as_deref().unwrap_or("")
                            );
                        }
                    }
                }
            }
        }
        if !self.only_a.is_empty() {
            let _ = writeln!(
                s,
                "\nfunctions only in {}: {}",
                self.a,
                self.only_a.join(", ")
            );
        }
        if !self.only_b.is_empty() {
            let _ = writeln!(
                s,
                "\nfunctions only in {}: {}",
                self.b,
                self.only_b.join(", ")
            );
        }
        let (same, changed, oa, ob) = self.counts();
        let _ = writeln!(
            s,
            "\n{} fields compared in {} shared functions: {same} same, {changed} differ, {oa} only in {}, {ob} only in {}",
            same + changed + oa + ob,
            self.functions.len(),
            self.a,
            self.b
        );
        let breaking = self.breaking();
        if breaking.is_empty() {
            let _ = writeln!(
                s,
                "a caller written against {} needs no changes for {}",
                self.a, self.b
            );
        } else {
            let _ = writeln!(s, "what a caller of {} must mind on {}:", self.a, self.b);
            for b in breaking {
                let _ = writeln!(s, "  - {b}");
            }
        }
        s
    }
}
