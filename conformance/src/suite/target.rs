//! Targets: a function prefix plus a profile of what the target's contract
//! promises where the documented workers differ (`golden/targets/*.yaml`).
//!
//! A case's `requires` entries are checked against the profile:
//! - `name`: the feature is present and truthy (not `false`, `null`, `0`, `""`);
//! - `!name`: the feature is absent or falsy;
//! - `name=value`: the feature's value, as text, equals `value` (a list
//!   value: one of its entries does, for a target that does each);
//! - `name<=n` / `name>=n`: the feature is a number within that bound (an
//!   implementation-defined bound such as a size limit).
//!
//! A worker-specific floor ([`FLOORS`]: the smallest idle TTL a worker
//! passes on…) never gates a case: a case that configures a smaller value
//! `stretch`es its wait by the floor where the profile states one, and runs
//! as written where it states none.
//!
//! Some features say how well a target does something the suite checks
//! (its output caps, its validation, its limits) rather than what the
//! target is (its languages, its contract's variant, its surfaces):
//! [`REFINES_ONLY`]. A `recommended` case never names those in `requires`,
//! so a profile cannot turn its check off; it names them in a step's
//! `refine`, which adds the exact figure where the profile states it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// One profile entry: its value and where the promise comes from.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Feature {
    pub value: Value,
    #[serde(default)]
    pub source: String,
}

/// A target description.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub name: String,
    /// Function prefix: `<prefix>::run`, and error codes `<prefix>::<code>`.
    pub prefix: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) sources: Vec<String>,
    /// Function suffixes whose schemas are snapshot-checked.
    pub functions: Vec<String>,
    pub profile: BTreeMap<String, Feature>,
}

/// Why a target could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("unknown target `{name}`: no {path} (known: {known})")]
    Unknown {
        name: String,
        path: String,
        known: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Features that only refine checks: a `recommended` case may not be gated
/// on them (see the module docs). `profile` cases still require them.
pub const REFINES_ONLY: &[&str] = &[
    "stream_cap_bytes",
    "handler_checked_at_registration",
    "request_limits",
    "secret_redaction",
    "bus_wide_id_check",
    "async_python_handler",
    "unknown_config_keys_refused",
    "timeout_clamp_default_path",
    "timeout_zero_is_default",
    "idle_ttl_floor_secs",
    "code_max_bytes",
    "source_max_bytes",
    "description_max_bytes",
    "functions_per_runtime_max",
    "namespace_max_bytes",
    "function_name_max_bytes",
];

/// Worker-specific floors: `(feature, what it floors, the draft's value)`.
/// A worker raises a configured value below its floor to the floor; a case
/// that configures a smaller one waits longer by it (`stretch`). A profile
/// that states none has none. A floor cannot be seen from outside, so the
/// draft states the value here, a generous one: a worker without a floor
/// still passes as soon as it reaps (the wait is only an upper bound), and
/// one with a floor up to it passes unedited.
pub const FLOORS: &[(&str, &str, &str)] = &[(
    "idle_ttl_floor_secs",
    "the smallest idle_ttl_secs the worker passes to sandbox::create; a smaller configured one is raised to it",
    "30",
)];

/// Whether `feature` is a worker-specific floor ([`FLOORS`]).
pub fn is_floor(feature: &str) -> bool {
    FLOORS.iter().any(|(f, _, _)| *f == feature)
}

/// Whether `feature` only refines checks ([`REFINES_ONLY`]).
pub fn refines_only(feature: &str) -> bool {
    REFINES_ONLY.contains(&feature)
}

/// The feature a requirement names.
pub fn requirement_feature(req: &str) -> &str {
    let r = req.strip_prefix('!').unwrap_or(req);
    r.split(['=', '<', '>']).next().unwrap_or(r).trim()
}

/// How a requirement compares the feature's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Equals,
    AtMost,
    AtLeast,
}

/// `name<=v`, `name>=v`, `name=v` or `name`.
fn split_requirement(body: &str) -> (&str, Option<(Compare, &str)>) {
    for (op, cmp) in [
        ("<=", Compare::AtMost),
        (">=", Compare::AtLeast),
        ("=", Compare::Equals),
    ] {
        if let Some((n, v)) = body.split_once(op) {
            return (n.trim(), Some((cmp, v.trim())));
        }
    }
    (body, None)
}

impl Target {
    /// Loads `dir/<name>.yaml`.
    pub fn load(dir: &Path, name: &str) -> Result<Target, TargetError> {
        let path = dir.join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path).map_err(|_| TargetError::Unknown {
            name: name.to_string(),
            path: path.display().to_string(),
            known: Target::names(dir).join(", "),
        })?;
        let t: Target = serde_yaml::from_str(&text).map_err(|e| TargetError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        if t.name != name {
            return Err(TargetError::Invalid {
                path: path.display().to_string(),
                message: format!("declares name `{}`, file says `{name}`", t.name),
            });
        }
        Ok(t)
    }

    /// Names of every target under `dir`.
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let p = e.path();
                        (p.extension().and_then(|x| x.to_str()) == Some("yaml"))
                            .then(|| p.file_stem()?.to_str().map(str::to_string))
                            .flatten()
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Every target under `dir`.
    pub fn load_all(dir: &Path) -> Result<Vec<Target>, TargetError> {
        Target::names(dir)
            .iter()
            .map(|n| Target::load(dir, n))
            .collect()
    }

    /// The full id of a target function.
    pub(crate) fn function(&self, suffix: &str) -> String {
        format!("{}::{suffix}", self.prefix)
    }

    /// Whether one requirement holds; `Err` names why not.
    pub fn check(&self, req: &str) -> Result<(), String> {
        let (negated, body) = match req.strip_prefix('!') {
            Some(b) => (true, b.trim()),
            None => (false, req.trim()),
        };
        let (name, wanted) = split_requirement(body);
        let value = self.profile.get(name).map(|f| &f.value);
        let number = |v: &Value, w: &str| v.as_f64().zip(w.parse::<f64>().ok());
        let holds = match (wanted, value) {
            // A list: the target does each of them (node code in either form).
            (Some((Compare::Equals, w)), Some(Value::Array(vs))) => vs.iter().any(|v| text(v) == w),
            (Some((Compare::Equals, w)), Some(v)) => text(v) == w,
            (Some((Compare::AtMost, w)), Some(v)) => number(v, w).is_some_and(|(v, w)| v <= w),
            (Some((Compare::AtLeast, w)), Some(v)) => number(v, w).is_some_and(|(v, w)| v >= w),
            (Some(_), None) => false,
            (None, Some(v)) => truthy(v),
            (None, None) => false,
        };
        if holds != negated {
            return Ok(());
        }
        let shown = value.map(text).unwrap_or_else(|| "absent".into());
        Err(format!("requires `{req}`; target has {name}={shown}"))
    }

    /// The number the profile states for `feature`, if it states one.
    pub(crate) fn number(&self, feature: &str) -> Option<f64> {
        self.profile.get(feature).and_then(|f| f.value.as_f64())
    }

    /// Whether the profile states a value for `feature` at all.
    pub(crate) fn declares(&self, feature: &str) -> bool {
        self.profile.contains_key(feature)
    }

    /// For a `profile`-level case: the first requirement naming a value this
    /// profile does not declare (such a case runs only where it does).
    pub fn undeclared(&self, reqs: &[String]) -> Option<String> {
        reqs.iter()
            .map(|r| requirement_feature(r))
            .find(|f| !self.declares(f))
            .map(|f| format!("profile-level case: the target's profile does not declare `{f}`"))
    }

    /// The first unmet requirement of a list.
    pub(crate) fn unmet(&self, reqs: &[String]) -> Option<String> {
        reqs.iter().find_map(|r| self.check(r).err())
    }
}

/// Features named by any target, and the floors: requirements outside
/// them are typos.
pub(crate) fn known_features(targets: &[Target]) -> BTreeSet<String> {
    targets
        .iter()
        .flat_map(|t| t.profile.keys().cloned())
        .chain(FLOORS.iter().map(|(f, _, _)| f.to_string()))
        .collect()
}
