//! Load-time checks of one step: the fields its action needs, and the
//! placeholders it may use.

use super::*;

pub(super) fn validate_step(s: &Step, private: bool) -> Result<(), String> {
    let kinds = [
        s.trigger.is_some(),
        s.call.is_some(),
        s.action.is_some(),
        s.parallel.is_some(),
    ]
    .iter()
    .filter(|k| **k)
    .count();
    if kinds != 1 {
        return Err("needs exactly one of trigger, call, action, parallel".into());
    }
    if s.payload.is_some() && s.trigger.is_none() && s.call.is_none() {
        return Err("payload only goes with trigger or call".into());
    }
    if let Some(a) = &s.action {
        if a.needs_private_env() && !private {
            return Err(format!(
                "action {} needs the case to declare an `environment`",
                action_name(a)
            ));
        }
    }
    if s.parallel.is_some() && (s.expect.is_some() || !s.capture.is_empty()) {
        return Err("a parallel step has no expect or capture of its own".into());
    }
    for (req, m) in &s.refine {
        if req.trim().is_empty() || req.starts_with("!=") {
            return Err(format!("refine: bad requirement `{req}`"));
        }
        if s.expect.as_ref().is_none_or(|e| e.response.is_none()) {
            return Err("refine adds to `expect.response`, which the step lacks".into());
        }
        Matcher::parse(&StandIn.fill(m), &Vars::new())
            .map_err(|e| format!("refine `{req}`: bad matcher: {e}"))?;
    }
    for p in s.capture.values() {
        if !(p.is_empty() || p.starts_with('/')) {
            return Err(format!("capture `{p}` is not a JSON pointer"));
        }
    }
    if let Some(e) = &s.expect {
        let n = [
            e.response.is_some(),
            e.error.is_some(),
            e.engine_error.is_some(),
        ]
        .iter()
        .filter(|k| **k)
        .count();
        if n != 1 {
            return Err("expect needs exactly one of response, error, engine_error".into());
        }
        if e.error.is_some() && s.action.is_some() {
            return Err("an action cannot expect a target error".into());
        }
        if let Some(spec) = &e.response {
            // Placeholders are filled at run time; check the shape with
            // every placeholder stood in for.
            let stand_in = StandIn;
            Matcher::parse(&stand_in.fill(spec), &Vars::new())
                .map_err(|e| format!("bad matcher: {e}"))?;
        }
        if let Some(ErrorExpect::Code(c) | ErrorExpect::Detailed { code: c, .. }) = &e.error {
            if c.contains("::") {
                return Err(format!(
                    "error `{c}`: write the short code; the target's prefix is added"
                ));
            }
        }
    }
    Ok(())
}

/// Replaces placeholders by a neutral word so a matcher can be parsed
/// before any variable exists.
pub(super) struct StandIn;

impl StandIn {
    fn fill(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(strip_placeholders(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.fill(x)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (strip_placeholders(k), self.fill(x)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

pub(super) fn strip_placeholders(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        match rest[at..].find('}') {
            Some(end) => {
                out.push_str("placeholder");
                rest = &rest[at + end + 1..];
            }
            None => {
                rest = &rest[at..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}
