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
//!
//! Arrays compare as multisets everywhere (`$exact` included): no seed fixes
//! the order of a list, so a case that needs one says so with `$ordered`.
//!
//! Placeholders (`${rt}`) are filled before parsing; inside regex forms
//! they are regex-escaped.

use regex::Regex;
use serde_json::{Map, Value};

use super::vars::{Splice, VarError, Vars};

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
    pub expected: String,
    pub actual: String,
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
pub fn json_eq(a: &Value, b: &Value) -> bool {
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
pub fn brief(v: Option<&Value>) -> String {
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
    /// Parses a matcher spec, filling placeholders from `vars`.
    pub fn parse(spec: &Value, vars: &Vars) -> Result<Matcher, MatcherError> {
        Matcher::parse_at(spec, vars, "")
    }

    fn fill(vars: &Vars, s: &str, splice: Splice, path: &str) -> Result<String, MatcherError> {
        vars.fill_str(s, splice)
            .map_err(|source| MatcherError::Var {
                path: path.to_string(),
                source,
            })
    }

    fn regex(vars: &Vars, v: &Value, path: &str) -> Result<Regex, MatcherError> {
        let s = v
            .as_str()
            .ok_or_else(|| spec_err(path, "a regex must be a string"))?;
        let pattern = Matcher::fill(vars, s, Splice::Regex, path)?;
        Regex::new(&pattern).map_err(|e| spec_err(path, format!("bad regex: {e}")))
    }

    fn string(vars: &Vars, v: &Value, path: &str) -> Result<String, MatcherError> {
        let s = v
            .as_str()
            .ok_or_else(|| spec_err(path, "expected a string"))?;
        Matcher::fill(vars, s, Splice::Text, path)
    }

    fn parse_at(spec: &Value, vars: &Vars, path: &str) -> Result<Matcher, MatcherError> {
        match spec {
            Value::Null => Ok(Matcher::Null),
            Value::String(s) => {
                let filled = vars
                    .fill_payload(&Value::String(s.clone()))
                    .map_err(|source| MatcherError::Var {
                        path: path.to_string(),
                        source,
                    })?;
                Ok(Matcher::Exact(filled))
            }
            Value::Bool(_) | Value::Number(_) => Ok(Matcher::Exact(spec.clone())),
            Value::Array(items) => Ok(Matcher::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, m)| Matcher::parse_at(m, vars, &format!("{path}/{i}")))
                    .collect::<Result<_, _>>()?,
            )),
            Value::Object(m) => Matcher::parse_object(m, vars, path),
        }
    }

    fn parse_object(
        m: &Map<String, Value>,
        vars: &Vars,
        path: &str,
    ) -> Result<Matcher, MatcherError> {
        let sub = |v: &Value, tag: &str| Matcher::parse_at(v, vars, &format!("{path}/{tag}"));
        if let Some(v) = one_key(m, "$exact") {
            let filled = vars.fill_payload(v).map_err(|source| MatcherError::Var {
                path: path.to_string(),
                source,
            })?;
            return Ok(Matcher::Exact(filled));
        }
        if let Some(v) = one_key(m, "$type") {
            let t = v
                .as_str()
                .and_then(JsonType::parse)
                .ok_or_else(|| spec_err(path, format!("unknown $type {v}")))?;
            return Ok(Matcher::Type(t));
        }
        if let Some(v) = one_key(m, "$regex") {
            return Ok(Matcher::Regex(Matcher::regex(vars, v, path)?));
        }
        if let Some(v) = one_key(m, "$not_regex") {
            return Ok(Matcher::NotRegex(Matcher::regex(vars, v, path)?));
        }
        if let Some(v) = one_key(m, "$contains") {
            return Ok(Matcher::Contains(Matcher::string(vars, v, path)?));
        }
        if let Some(v) = one_key(m, "$not_contains") {
            return Ok(Matcher::NotContains(Matcher::string(vars, v, path)?));
        }
        if one_key(m, "$absent").is_some() {
            return Ok(Matcher::Absent);
        }
        if one_key(m, "$null").is_some() {
            return Ok(Matcher::Null);
        }
        if one_key(m, "$any").is_some() {
            return Ok(Matcher::Any);
        }
        if let Some(v) = one_key(m, "$optional") {
            return Ok(Matcher::Optional(Box::new(sub(v, "$optional")?)));
        }
        if let (Some(items), 2) = (m.get("$ordered"), m.len()) {
            let why = m.get("why").and_then(Value::as_str).unwrap_or("").trim();
            if why.is_empty() {
                return Err(spec_err(
                    path,
                    "$ordered needs a `why` citing what fixes the order",
                ));
            }
            let Value::Array(items) = items else {
                return Err(spec_err(path, "$ordered takes an array"));
            };
            return Ok(Matcher::Ordered(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| sub(x, &format!("$ordered/{i}")))
                    .collect::<Result<_, _>>()?,
            ));
        }
        if let Some(v) = one_key(m, "$items") {
            return Ok(Matcher::Items(Box::new(sub(v, "$items")?)));
        }
        if let Some(v) = one_key(m, "$some") {
            return Ok(Matcher::Some(Box::new(sub(v, "$some")?)));
        }
        if let Some(v) = one_key(m, "$none") {
            return Ok(Matcher::None(Box::new(sub(v, "$none")?)));
        }
        if let Some(v) = one_key(m, "$not") {
            return Ok(Matcher::Not(Box::new(sub(v, "$not")?)));
        }
        if let Some(v) = one_key(m, "$nowhere") {
            return Ok(Matcher::Nowhere(Matcher::string(vars, v, path)?));
        }
        if let Some(v) = one_key(m, "$nowhere_regex") {
            return Ok(Matcher::NowhereRegex(Matcher::regex(vars, v, path)?));
        }
        if let Some(v) = one_key(m, "$all") {
            let items = v
                .as_array()
                .ok_or_else(|| spec_err(path, "$all takes a list of matchers"))?;
            return Ok(Matcher::All(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| Matcher::parse_at(x, vars, &format!("{path}/$all/{i}")))
                    .collect::<Result<_, _>>()?,
            ));
        }
        if let Some(v) = one_key(m, "$len") {
            let bound = |k: &str| -> Result<Option<u64>, MatcherError> {
                match v.get(k) {
                    None => Ok(None),
                    Some(x) => x
                        .as_u64()
                        .map(Some)
                        .ok_or_else(|| spec_err(path, format!("$len.{k} must be an integer"))),
                }
            };
            if !v.is_object() {
                return Err(spec_err(path, "$len takes {min, max}"));
            }
            return Ok(Matcher::Len {
                min: bound("min")?,
                max: bound("max")?,
            });
        }
        // An object matcher: plain keys plus optional flags.
        let mut extra = Extra::Allow;
        let mut null_as_absent = false;
        let mut fields = Vec::new();
        let body: Option<&Map<String, Value>> = match m.get("$object") {
            Some(Value::Object(inner)) => Some(inner),
            Some(_) => return Err(spec_err(path, "$object takes a mapping")),
            None => None,
        };
        for (k, v) in m {
            match k.as_str() {
                "$object" => {}
                "$extra" => {
                    extra = match v.as_str() {
                        Some("allow") => Extra::Allow,
                        Some("forbid") => Extra::Forbid,
                        _ => return Err(spec_err(path, "$extra is `allow` or `forbid`")),
                    }
                }
                "$null_as_absent" => {
                    null_as_absent = v
                        .as_bool()
                        .ok_or_else(|| spec_err(path, "$null_as_absent is a boolean"))?
                }
                other if other.starts_with('$') && body.is_none() => {
                    return Err(spec_err(
                        path,
                        format!("unknown matcher `{other}` (or it is mixed with other keys)"),
                    ))
                }
                other if body.is_none() => {
                    let key = Matcher::fill(vars, other, Splice::Text, path)?;
                    let m = Matcher::parse_at(v, vars, &format!("{path}/{key}"))?;
                    fields.push((key, m));
                }
                other => {
                    return Err(spec_err(
                        path,
                        format!("`{other}` beside $object; put fields inside $object"),
                    ))
                }
            }
        }
        if let Some(inner) = body {
            for (k, v) in inner {
                let key = Matcher::fill(vars, k, Splice::Text, path)?;
                let m = Matcher::parse_at(v, vars, &format!("{path}/{key}"))?;
                fields.push((key, m));
            }
        }
        Ok(Matcher::Object {
            fields,
            extra,
            null_as_absent,
        })
    }

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
        }
    }

    fn fail(&self, actual: Option<&Value>, path: &str, out: &mut Vec<Mismatch>) {
        out.push(Mismatch {
            path: path.to_string(),
            expected: self.describe(),
            actual: brief(actual),
        });
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
                let Some(arr) = v.as_array() else {
                    self.fail(Some(v), path, out);
                    return;
                };
                if arr.len() != items.len() {
                    self.fail(Some(v), path, out);
                    return;
                }
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
                let Some(arr) = v.as_array() else {
                    self.fail(Some(v), path, out);
                    return;
                };
                if arr.len() != items.len() {
                    self.fail(Some(v), path, out);
                    return;
                }
                for (i, (m, x)) in items.iter().zip(arr).enumerate() {
                    m.check_at(Some(x), &format!("{path}/{i}"), out);
                }
                return;
            }
            Matcher::Items(m) => {
                let Some(arr) = v.as_array() else {
                    self.fail(Some(v), path, out);
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

/// Whether any string inside `v` (object keys included) satisfies `pred`.
fn any_string(v: &Value, pred: &dyn Fn(&str) -> bool) -> bool {
    match v {
        Value::String(s) => pred(s),
        Value::Array(a) => a.iter().any(|x| any_string(x, pred)),
        Value::Object(m) => m.iter().any(|(k, x)| pred(k) || any_string(x, pred)),
        _ => false,
    }
}
