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
    if let Some(st) = &s.stretch {
        if st.by.trim().is_empty() {
            return Err("stretch: `by` names the profile value (a floor)".into());
        }
        if !super::super::target::is_floor(&st.by) {
            return Err(format!(
                "stretch: `{}` is not a worker-specific floor (target::FLOORS)",
                st.by
            ));
        }
        if st.eventually_ms == 0 && st.repeat == 0 {
            return Err("stretch: says how much `eventually_ms` or `repeat` grows per unit".into());
        }
        if st.eventually_ms > 0 && s.eventually_ms.is_none() {
            return Err("stretch: `eventually_ms` grows a wait the step lacks".into());
        }
        if st.repeat > 0 && s.repeat.is_none() {
            return Err("stretch: `repeat` grows a repetition the step lacks".into());
        }
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

/// A case that uses `${profile.<feature>}` requires the feature, so it is
/// skipped, not failed, where the target's profile does not declare it.
pub(super) fn profile_placeholders_required(case: &Case, text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(at) = rest.find("${profile.") {
        let after = &rest[at + "${profile.".len()..];
        let Some(end) = after.find('}') else {
            return Err("unterminated `${profile.` placeholder".into());
        };
        let feature = &after[..end];
        let required = case.requires.iter().any(|r| {
            !r.starts_with('!') && super::super::target::requirement_feature(r) == feature
        });
        if !required {
            return Err(format!(
                "uses `${{profile.{feature}}}` but does not require `{feature}`: add it to `requires`"
            ));
        }
        rest = &after[end..];
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
