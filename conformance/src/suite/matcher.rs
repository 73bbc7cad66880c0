//! Response matchers: how a case says what a response must look like without
//! pinning what the contract leaves open (durations, ids, message wording).
//!
//! A matcher is written as JSON/YAML:
//!
//! | form | meaning |
//! | --- | --- |
//! | `4`, `"4\n"`, `true` | exact value (numbers compare numerically) |
//! | `null` | present and null (see `$absent` for absent) |
//! | `[m, …]` | array of exactly these elements, each a matcher, in any order (a multiset) |
//! | `{$ordered: [m, …], why: "…"}` | the same, in this order; `why` cites what fixes the order |
//! | `{k: m, …}` | object subset: each listed key matches, others allowed |
//! | `{k: m, $extra: forbid}` | strict object: no keys beyond the listed ones |
//! | `{k: m, $null_as_absent: true}` | absent and null count as the same here |
//! | `{$exact: v}` | deep equality, no matchers inside `v` |
//! | `{$type: integer}` | type only: `null boolean integer number string array object` |
//! | `{$regex: "^rt-"}` / `{$not_regex: …}` | a string matching / not matching |
//! | `{$contains: "s"}` / `{$not_contains: "s"}` | a string containing / lacking `s` |
//! | `{$absent: true}` | the key is absent (only meaningful as an object member) |
//! | `{$null: true}` | present and null |
//! | `{$any: true}` | present, any value |
//! | `{$optional: m}` | absent, or present and matching `m` |
//! | `{$items: m}` | an array whose every element matches `m` |
//! | `{$some: m}` / `{$none: m}` | an array with at least one / no element matching `m` |
//! | `{$len: {min: a, max: b}}` | string (bytes) or array length bounds |
//! | `{$all: [m, …]}` | every matcher holds |
//! | `{$not: m}` | `m` does not hold |
//! | `{$nowhere: "s"}` / `{$nowhere_regex: "re"}` | no string anywhere inside (keys too) contains `s` / matches |
//! | `{$somewhere: m}` | the value itself or some value anywhere inside it matches `m` (wherever a shape puts it) |
//!
//! Arrays compare as multisets everywhere (`$exact` included): no seed fixes
//! the order of a list, so a case that needs one says so with `$ordered`.
//!
//! Placeholders (`${rt}`) are filled before parsing; inside regex forms
//! they are regex-escaped.

use regex::Regex;
use serde_json::{Map, Value};

use super::vars::{Splice, VarError, Vars};

mod parse;

/// A JSON type for `$type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    Null,
    Boolean,
    Integer,
    Number,
    String,
    Array,
    Object,
}

impl JsonType {
    fn parse(s: &str) -> Option<JsonType> {
        Some(match s {
            "null" => JsonType::Null,
            "boolean" | "bool" => JsonType::Boolean,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "string" => JsonType::String,
            "array" => JsonType::Array,
            "object" => JsonType::Object,
            _ => return None,
        })
    }

    fn holds(self, v: &Value) -> bool {
        match self {
            JsonType::Null => v.is_null(),
            JsonType::Boolean => v.is_boolean(),
            JsonType::Integer => {
                v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            JsonType::Number => v.is_number(),
            JsonType::String => v.is_string(),
            JsonType::Array => v.is_array(),
            JsonType::Object => v.is_object(),
        }
    }
}

/// Whether an object matcher tolerates keys it does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    Allow,
    Forbid,
}

/// A compiled matcher.
#[derive(Debug, Clone)]
pub enum Matcher {
    Exact(Value),
    Type(JsonType),
    Regex(Regex),
    NotRegex(Regex),
    Contains(String),
    NotContains(String),
    Absent,
    Null,
    Any,
    Optional(Box<Matcher>),
    Object {
        fields: Vec<(String, Matcher)>,
        extra: Extra,
        null_as_absent: bool,
    },
    /// Same elements, any order.
    Array(Vec<Matcher>),
    /// Same elements, this order.
    Ordered(Vec<Matcher>),
    Items(Box<Matcher>),
    Some(Box<Matcher>),
    None(Box<Matcher>),
    Len {
        min: Option<u64>,
        max: Option<u64>,
    },
    All(Vec<Matcher>),
    Not(Box<Matcher>),
    Nowhere(String),
    NowhereRegex(Regex),
    Somewhere(Box<Matcher>),
}

/// Why a matcher spec is malformed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatcherError {
    #[error("at {path}: {message}")]
    Spec { path: String, message: String },
    #[error("at {path}: {source}")]
    Var {
        path: String,
        #[source]
        source: VarError,
    },
}

/// One way a value failed its matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// JSON-pointer-like path (`/stdout`, `/unregistered/0`), `` for the root.
    pub path: String,
    pub(crate) expected: String,
    pub(crate) actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: expected {}, got {}", self.expected, self.actual)
    }
}

fn spec_err(path: &str, message: impl Into<String>) -> MatcherError {
    MatcherError::Spec {
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
        message: message.into(),
    }
}

/// Numeric-aware deep equality: `1 == 1.0`, objects by key.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return x == y;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            // A multiset: equality is an equivalence, so greedy pairing is exact.
            let mut used = vec![false; y.len()];
            x.len() == y.len()
                && x.iter().all(|a| {
                    let hit = y
                        .iter()
                        .enumerate()
                        .find(|(j, b)| !used[*j] && json_eq(a, b));
                    hit.map(|(j, _)| used[j] = true).is_some()
                })
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Whether every matcher can be paired with a distinct element (a perfect
/// bipartite matching, by augmenting paths: lists in cases are short).
fn multiset_match(items: &[Matcher], arr: &[Value]) -> bool {
    let fits: Vec<Vec<bool>> = items
        .iter()
        .map(|m| arr.iter().map(|x| m.matches(Some(x))).collect())
        .collect();
    let mut owner: Vec<Option<usize>> = vec![None; arr.len()];
    fn augment(
        i: usize,
        fits: &[Vec<bool>],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        for j in 0..owner.len() {
            if fits[i][j] && !seen[j] {
                seen[j] = true;
                if owner[j].is_none_or(|k| augment(k, fits, owner, seen)) {
                    owner[j] = Some(i);
                    return true;
                }
            }
        }
        false
    }
    (0..items.len()).all(|i| augment(i, &fits, &mut owner, &mut vec![false; arr.len()]))
}

/// A short rendering of a value for messages.
pub(crate) fn brief(v: Option<&Value>) -> String {
    match v {
        None => "absent".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 160 {
                let cut: String = s.chars().take(150).collect();
                format!("{cut}… ({} bytes)", s.len())
            } else {
                s
            }
        }
    }
}

fn one_key<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if m.len() == 1 {
        m.get(key)
    } else {
        None
    }
}

impl Matcher {
    /// Checks `actual` (None = absent) and returns every mismatch.
    pub fn check(&self, actual: Option<&Value>) -> Vec<Mismatch> {
        let mut out = Vec::new();
        self.check_at(actual, "", &mut out);
        out
    }

    /// Whether `actual` matches.
    pub fn matches(&self, actual: Option<&Value>) -> bool {
        self.check(actual).is_empty()
    }

    fn describe(&self) -> String {
        match self {
            Matcher::Exact(v) => brief(Some(v)),
            Matcher::Type(t) => format!("a value of type {t:?}").to_lowercase(),
            Matcher::Regex(r) => format!("a string matching /{}/", r.as_str()),
            Matcher::NotRegex(r) => format!("a string not matching /{}/", r.as_str()),
            Matcher::Contains(s) => format!("a string containing {s:?}"),
            Matcher::NotContains(s) => format!("a string not containing {s:?}"),
            Matcher::Absent => "absent".into(),
            Matcher::Null => "null".into(),
            Matcher::Any => "any value (present)".into(),
            Matcher::Optional(m) => format!("absent or {}", m.describe()),
            Matcher::Object { extra, .. } => match extra {
                Extra::Allow => "an object".into(),
                Extra::Forbid => "an object with only the listed keys".into(),
            },
            Matcher::Array(items) => {
                format!("an array of {} elements (any order)", items.len())
            }
            Matcher::Ordered(items) => {
                format!("an array of {} elements in this order", items.len())
            }
            Matcher::Items(m) => format!("an array whose every element is {}", m.describe()),
            Matcher::Some(m) => format!("an array with an element that is {}", m.describe()),
            Matcher::None(m) => format!("an array with no element that is {}", m.describe()),
            Matcher::Len { min, max } => format!("a length in [{min:?}, {max:?}]"),
            Matcher::All(ms) => ms
                .iter()
                .map(Matcher::describe)
                .collect::<Vec<_>>()
                .join(" and "),
            Matcher::Not(m) => format!("not {}", m.describe()),
            Matcher::Nowhere(s) => format!("a value with no string containing {s:?}"),
            Matcher::NowhereRegex(r) => {
                format!("a value with no string matching /{}/", r.as_str())
            }
            Matcher::Somewhere(m) => format!("a value holding, somewhere, {}", m.describe()),
        }
    }

    fn fail(&self, actual: Option<&Value>, path: &str, out: &mut Vec<Mismatch>) {
        out.push(Mismatch {
            path: path.to_string(),
            expected: self.describe(),
            actual: brief(actual),
        });
    }

    /// `v` as an array (of `len` elements, when given); otherwise this
    /// matcher's mismatch is recorded and there is nothing to descend into.
    fn array_of<'v>(
        &self,
        v: &'v Value,
        len: Option<usize>,
        path: &str,
        out: &mut Vec<Mismatch>,
    ) -> Option<&'v Vec<Value>> {
        let arr = v.as_array().filter(|a| len.is_none_or(|n| a.len() == n));
        if arr.is_none() {
            self.fail(Some(v), path, out);
        }
        arr
    }

    fn check_at(&self, actual: Option<&Value>, path: &str, out: &mut Vec<Mismatch>) {
        match self {
            Matcher::Absent => {
                if actual.is_some() {
                    self.fail(actual, path, out)
                }
            }
            Matcher::Optional(m) => {
                if actual.is_some() {
                    m.check_at(actual, path, out)
                }
            }
            Matcher::Not(m) => {
                if m.check(actual).is_empty() {
                    self.fail(actual, path, out)
                }
            }
            _ => {
                let Some(v) = actual else {
                    self.fail(None, path, out);
                    return;
                };
                self.check_present(v, path, out)
            }
        }
    }

    fn check_present(&self, v: &Value, path: &str, out: &mut Vec<Mismatch>) {
        let ok = match self {
            Matcher::Exact(e) => json_eq(e, v),
            Matcher::Type(t) => t.holds(v),
            Matcher::Regex(r) => v.as_str().is_some_and(|s| r.is_match(s)),
            Matcher::NotRegex(r) => v.as_str().is_some_and(|s| !r.is_match(s)),
            Matcher::Contains(c) => v.as_str().is_some_and(|s| s.contains(c.as_str())),
            Matcher::NotContains(c) => v.as_str().is_some_and(|s| !s.contains(c.as_str())),
            Matcher::Null => v.is_null(),
            Matcher::Any => true,
            Matcher::Len { min, max } => {
                let len = match v {
                    Value::String(s) => Some(s.len() as u64),
                    Value::Array(a) => Some(a.len() as u64),
                    _ => None,
                };
                len.is_some_and(|l| min.is_none_or(|m| l >= m) && max.is_none_or(|m| l <= m))
            }
            Matcher::Nowhere(s) => !any_string(v, &|x| x.contains(s.as_str())),
            Matcher::NowhereRegex(r) => !any_string(v, &|x| r.is_match(x)),
            Matcher::Somewhere(m) => any_value(v, &|x| m.matches(Some(x))),
            Matcher::All(ms) => {
                for m in ms {
                    m.check_at(Some(v), path, out);
                }
                return;
            }
            Matcher::Object {
                fields,
                extra,
                null_as_absent,
            } => {
                let Some(obj) = v.as_object() else {
                    self.fail(Some(v), path, out);
                    return;
                };
                for (k, m) in fields {
                    let mut got = obj.get(k);
                    if *null_as_absent && got.is_some_and(Value::is_null) {
                        got = None;
                    }
                    let child = format!("{path}/{k}");
                    if *null_as_absent && got.is_none() && matches!(m, Matcher::Null) {
                        continue;
                    }
                    m.check_at(got, &child, out);
                }
                if *extra == Extra::Forbid {
                    for (k, x) in obj {
                        if fields.iter().all(|(f, _)| f != k) {
                            if *null_as_absent && x.is_null() {
                                continue;
                            }
                            out.push(Mismatch {
                                path: format!("{path}/{k}"),
                                expected: "no such key (strict object)".into(),
                                actual: brief(Some(x)),
                            });
                        }
                    }
                }
                return;
            }
            Matcher::Array(items) => {
                let Some(arr) = self.array_of(v, Some(items.len()), path, out) else {
                    return;
                };
                if multiset_match(items, arr) {
                    return;
                }
                // No arrangement fits: name the element-wise differences in
                // the order given, which is what a reader compares by eye.
                let before = out.len();
                for (i, (m, x)) in items.iter().zip(arr).enumerate() {
                    m.check_at(Some(x), &format!("{path}/{i}"), out);
                }
                if out.len() == before {
                    self.fail(Some(v), path, out);
                }
                return;
            }
            Matcher::Ordered(items) => {
                let Some(arr) = self.array_of(v, Some(items.len()), path, out) else {
                    return;
                };
                for (i, (m, x)) in items.iter().zip(arr).enumerate() {
                    m.check_at(Some(x), &format!("{path}/{i}"), out);
                }
                return;
            }
            Matcher::Items(m) => {
                let Some(arr) = self.array_of(v, None, path, out) else {
                    return;
                };
                for (i, x) in arr.iter().enumerate() {
                    m.check_at(Some(x), &format!("{path}/{i}"), out);
                }
                return;
            }
            Matcher::Some(m) => v
                .as_array()
                .is_some_and(|a| a.iter().any(|x| m.matches(Some(x)))),
            Matcher::None(m) => v
                .as_array()
                .is_some_and(|a| !a.iter().any(|x| m.matches(Some(x)))),
            Matcher::Absent | Matcher::Optional(_) | Matcher::Not(_) => {
                unreachable!("handled in check_at")
            }
        };
        if !ok {
            self.fail(Some(v), path, out);
        }
    }
}

/// Whether `v` itself or any value inside it satisfies `pred`.
fn any_value(v: &Value, pred: &dyn Fn(&Value) -> bool) -> bool {
    pred(v)
        || match v {
            Value::Array(a) => a.iter().any(|x| any_value(x, pred)),
            Value::Object(m) => m.values().any(|x| any_value(x, pred)),
            _ => false,
        }
}

/// Whether any string inside `v` (object keys included) satisfies `pred`.
fn any_string(v: &Value, pred: &dyn Fn(&str) -> bool) -> bool {
    match v {
        Value::String(s) => pred(s),
        Value::Array(a) => a.iter().any(|x| any_string(x, pred)),
        Value::Object(m) => m.iter().any(|(k, x)| pred(k) || any_string(x, pred)),
        _ => false,
    }
}
