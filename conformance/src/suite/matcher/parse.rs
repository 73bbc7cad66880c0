//! Parsing a matcher spec (YAML/JSON) into a `Matcher`, filling
//! placeholders from the case's variables.

use super::*;

impl Matcher {
    /// Parses a matcher spec, filling placeholders from `vars`.
    pub fn parse(spec: &Value, vars: &Vars) -> Result<Matcher, MatcherError> {
        Matcher::parse_at(spec, vars, "")
    }

    pub(super) fn fill(
        vars: &Vars,
        s: &str,
        splice: Splice,
        path: &str,
    ) -> Result<String, MatcherError> {
        vars.fill_str(s, splice)
            .map_err(|source| MatcherError::Var {
                path: path.to_string(),
                source,
            })
    }

    pub(super) fn regex(vars: &Vars, v: &Value, path: &str) -> Result<Regex, MatcherError> {
        let s = v
            .as_str()
            .ok_or_else(|| spec_err(path, "a regex must be a string"))?;
        let pattern = Matcher::fill(vars, s, Splice::Regex, path)?;
        Regex::new(&pattern).map_err(|e| spec_err(path, format!("bad regex: {e}")))
    }

    pub(super) fn string(vars: &Vars, v: &Value, path: &str) -> Result<String, MatcherError> {
        let s = v
            .as_str()
            .ok_or_else(|| spec_err(path, "expected a string"))?;
        Matcher::fill(vars, s, Splice::Text, path)
    }

    pub(super) fn parse_at(spec: &Value, vars: &Vars, path: &str) -> Result<Matcher, MatcherError> {
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

    pub(super) fn parse_object(
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
        if let Some(v) = one_key(m, "$somewhere") {
            return Ok(Matcher::Somewhere(Box::new(sub(v, "$somewhere")?)));
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
                // `${…}` is a placeholder naming a field, not a matcher.
                other if other.starts_with('$') && !other.starts_with("${") && body.is_none() => {
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
}
