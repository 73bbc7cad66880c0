//! Placeholders: `${name}` in payloads, function ids and matchers, filled
//! from the case's built-ins (`ns`, `uuid`, `prefix`), the target's profile
//! values (`profile.<feature>`) and its captures.
//!
//! A string that is exactly one placeholder takes the variable's JSON value
//! (so a captured object or number stays one); a placeholder inside a longer
//! string is spliced in as text. Payloads may also use the generator
//! `{"$repeat": {"text": "x", "times": 1048577}}` for large inputs.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Why a placeholder could not be filled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VarError {
    #[error("unknown placeholder `${{{0}}}` (not a built-in and not captured by an earlier step)")]
    Unknown(String),
    #[error("unterminated placeholder in `{0}`")]
    Unterminated(String),
    #[error("bad `$repeat` generator: {0}")]
    BadRepeat(String),
}

/// How a substituted value is spliced into a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Splice {
    /// As text.
    Text,
    /// Regex-escaped, for matcher patterns.
    Regex,
}

/// The variables of one case run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vars {
    map: BTreeMap<String, Value>,
}

impl Vars {
    pub fn new() -> Vars {
        Vars::default()
    }

    pub fn set(&mut self, name: impl Into<String>, value: Value) {
        self.map.insert(name.into(), value);
    }

    fn text_of(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// Fills every placeholder of `s`.
    pub(crate) fn fill_str(&self, s: &str, splice: Splice) -> Result<String, VarError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let Some(end) = after.find('}') else {
                return Err(VarError::Unterminated(s.to_string()));
            };
            let name = &after[..end];
            let value = self
                .map
                .get(name)
                .ok_or_else(|| VarError::Unknown(name.to_string()))?;
            let text = Vars::text_of(value);
            match splice {
                Splice::Text => out.push_str(&text),
                Splice::Regex => out.push_str(&regex::escape(&text)),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Fills a string that may be exactly one placeholder (then the value
    /// keeps its JSON type).
    fn fill_value_str(&self, s: &str) -> Result<Value, VarError> {
        if let Some(name) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
            if !name.contains("${") && !name.contains('}') {
                return self
                    .map
                    .get(name)
                    .cloned()
                    .ok_or_else(|| VarError::Unknown(name.to_string()));
            }
        }
        Ok(Value::String(self.fill_str(s, Splice::Text)?))
    }

    /// Fills every string of a payload (keys included) and expands
    /// generators.
    pub(crate) fn fill_payload(&self, v: &Value) -> Result<Value, VarError> {
        Ok(match v {
            Value::String(s) => self.fill_value_str(s)?,
            Value::Array(a) => Value::Array(
                a.iter()
                    .map(|x| self.fill_payload(x))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(m) => {
                if let Some(spec) = m.get("$repeat") {
                    if m.len() == 1 {
                        return self.repeat(spec);
                    }
                }
                let mut out = Map::new();
                for (k, x) in m {
                    out.insert(self.fill_str(k, Splice::Text)?, self.fill_payload(x)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    fn repeat(&self, spec: &Value) -> Result<Value, VarError> {
        let text = spec
            .get("text")
            .and_then(Value::as_str)
            .ok_or_else(|| VarError::BadRepeat("needs `text` (a string)".into()))?;
        let times = spec
            .get("times")
            .and_then(Value::as_u64)
            .ok_or_else(|| VarError::BadRepeat("needs `times` (an integer)".into()))?;
        if times > 64 * 1024 * 1024 {
            return Err(VarError::BadRepeat("`times` above 64 Mi".into()));
        }
        let prefix = match spec.get("prefix") {
            Some(Value::String(p)) => self.fill_str(p, Splice::Text)?,
            _ => String::new(),
        };
        let suffix = match spec.get("suffix") {
            Some(Value::String(p)) => self.fill_str(p, Splice::Text)?,
            _ => String::new(),
        };
        let body = self.fill_str(text, Splice::Text)?.repeat(times as usize);
        Ok(Value::String(format!("{prefix}{body}{suffix}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_placeholders_keep_their_type_and_partial_ones_splice() {
        let mut v = Vars::new();
        v.set("n", json!(21));
        v.set("ns", json!("cf-1"));
        let p = v
            .fill_payload(&json!({"n": "${n}", "id": "${ns}::double", "${ns}": 1}))
            .unwrap();
        assert_eq!(p, json!({"n": 21, "id": "cf-1::double", "cf-1": 1}));
        assert_eq!(
            v.fill_payload(&json!("${nope}")),
            Err(VarError::Unknown("nope".into()))
        );
    }

    #[test]
    fn repeat_builds_large_strings_and_regex_splices_escape() {
        let v = Vars::new();
        let p = v
            .fill_payload(&json!({"code": {"$repeat": {"text": "x", "times": 5, "prefix": "#"}}}))
            .unwrap();
        assert_eq!(p, json!({"code": "#xxxxx"}));
        let mut v = Vars::new();
        v.set("id", json!("a.b"));
        assert_eq!(v.fill_str("^${id}$", Splice::Regex).unwrap(), "^a\\.b$");
    }
}
