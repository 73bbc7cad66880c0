//! The step model of a case: what a step does (`trigger`, `call`, `action`,
//! `parallel`), what it expects, and what a profile value refines.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// One step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Step {
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// A target function by suffix: `run` → `<prefix>::run`.
    #[serde(default)]
    pub(crate) trigger: Option<String>,
    /// Any function id (placeholders allowed), e.g. `${ns}::double`.
    #[serde(default)]
    pub(crate) call: Option<String>,
    #[serde(default)]
    pub(crate) action: Option<Action>,
    #[serde(default)]
    pub(crate) parallel: Option<Vec<Vec<Step>>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) payload: Option<Value>,
    /// Client-side deadline of the call (default 60 s).
    #[serde(default)]
    pub(crate) timeout_ms: Option<u64>,
    /// What must come back; omitted means "any successful response".
    #[serde(default)]
    pub(crate) expect: Option<Expect>,
    /// `name: /json/pointer` into the response (or action output).
    #[serde(default)]
    pub(crate) capture: BTreeMap<String, String>,
    /// The step must complete within this many milliseconds.
    #[serde(default)]
    pub(crate) within_ms: Option<u64>,
    /// The step must take at least this many milliseconds.
    #[serde(default)]
    pub(crate) after_ms: Option<u64>,
    /// Retry the step until it holds or this many milliseconds pass.
    #[serde(default)]
    pub(crate) eventually_ms: Option<u64>,
    /// Run the step this many times in a row, with `${i}` = 0, 1, …
    #[serde(default)]
    pub(crate) repeat: Option<u32>,
    /// What a profile value adds to `expect.response`: requirement (as in
    /// `requires`) → a response matcher, checked too (`$all`) when the
    /// target meets the requirement. A profile value refines a check; it
    /// never turns one off.
    #[serde(default)]
    pub(crate) refine: BTreeMap<String, Value>,
    /// A worker-specific floor (a profile value, [`crate::suite::target::FLOORS`])
    /// that lengthens the step where the profile states it: a worker that
    /// raises the small value a case configures to its floor is waited for,
    /// never failed for the harness's impatience. No floor stated, no change.
    #[serde(default)]
    pub(crate) stretch: Option<Stretch>,
}

/// `stretch: {by: <floor>, eventually_ms: <per unit>, repeat: <per unit>}`:
/// how much longer a step waits, or how many more times it runs, per unit
/// of the floor the target's profile states.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stretch {
    /// The profile value, a number (`idle_ttl_floor_secs`).
    pub(crate) by: String,
    /// Milliseconds added to `eventually_ms` per unit of it.
    #[serde(default)]
    pub(crate) eventually_ms: u64,
    /// Runs added to `repeat` per unit of it.
    #[serde(default)]
    pub(crate) repeat: u32,
    /// The value the target states, once [`Step::stretched`] applied it.
    #[serde(skip)]
    pub(crate) stated: Option<f64>,
}

impl Stretch {
    /// What a failure of the stretched step adds, so a worker with an
    /// unstated floor learns where to state it.
    pub(crate) fn note(&self) -> String {
        match self.stated {
            Some(v) => format!(" (stretched for the profile's {}: {v})", self.by),
            None => format!(
                " (the profile states no `{}`; a worker with such a floor states it there, and this step waits for it)",
                self.by
            ),
        }
    }
}

/// Environment control and probes. Each yields a JSON value that `expect`
/// and `capture` work on like a response.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Action {
    /// Finds the live sandbox holding `file` (through `sandbox::list` and
    /// `sandbox::fs::read`): `{found, sandbox_id?}`.
    LocateSandbox { file: String },
    /// Registers `function_id` from the suite's own client (another worker
    /// on the bus); unregistered when the case ends. `{registered: true}`.
    RegisterForeign { function_id: String },
    /// Declares trigger type `id` from the suite's own client, playing its
    /// owner (the harness for `harness::hook::pre-generate`): bindings to it
    /// become live and listed. Undeclared when the case ends. `{declared: true}`.
    DeclareTriggerType { id: String },
    /// SIGTERM the worker, wait for it to exit, start it again, wait ready.
    RestartWorker {},
    /// SIGTERM the worker and wait for it to exit: `{exit_code}`.
    StopWorker {},
    /// Connect iii-sandbox (an environment booted with `sandbox: false`).
    StartSandbox {},
    /// The worker's log so far (its stdout and stderr both): `{log}`.
    WorkerLog {},
    /// Wait for the worker process to exit by itself: `{exited, success, exit_code}`.
    WorkerExit { within_ms: u64 },
    /// Binds a function of the suite's own client to trigger type
    /// `trigger_type` (with `config`, default `{}`) and records every payload
    /// it is called with, until the case ends. `{subscribed: true}`.
    Subscribe {
        trigger_type: String,
        #[serde(default)]
        config: Option<Value>,
    },
    /// What this case's subscribers received so far, in arrival order:
    /// `{events: [payload…], kinds: [payload.event…]}`.
    Received {},
    /// Creates a data channel from the suite's own client, named `name`
    /// in the case, and starts reading it (`read: first`: one frame, then
    /// the reader goes away): `{writer}`, the writer ref to hand over
    /// (capture it, e.g. into a run's `output`).
    OpenChannel {
        name: String,
        #[serde(default)]
        read: crate::suite::runner::ReadMode,
    },
    /// What channel `name` carried, once its end frame came, its reader
    /// went away, or `wait_ms` (default 10 s) passed: `{frames, types,
    /// seqs, stdout, stderr, end, first_frame_ms, done}`.
    ChannelFrames {
        name: String,
        #[serde(default)]
        wait_ms: Option<u64>,
    },
}

impl Action {
    /// Whether the action needs a private (hermetic) environment.
    pub(crate) fn needs_private_env(&self) -> bool {
        !matches!(
            self,
            Action::LocateSandbox { .. }
                | Action::RegisterForeign { .. }
                | Action::DeclareTriggerType { .. }
                | Action::Subscribe { .. }
                | Action::Received {}
                | Action::OpenChannel { .. }
                | Action::ChannelFrames { .. }
        )
    }
}

/// A key that is present holds a value, even `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// What a step expects.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expect {
    /// A successful response matching this matcher (`null` included).
    #[serde(default, deserialize_with = "present")]
    pub(crate) response: Option<Value>,
    /// A target error: the short code (`invalid_request`), in either envelope.
    #[serde(default)]
    pub(crate) error: Option<ErrorExpect>,
    /// An engine error code, verbatim (`function_not_found`, `NOT_FOUND`).
    #[serde(default)]
    pub(crate) engine_error: Option<String>,
}

/// An expected target error.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum ErrorExpect {
    Code(String),
    Detailed {
        code: String,
        /// Tokens the contract requires in the message (field names,
        /// commands, S-codes) — never wording.
        #[serde(default)]
        message_has: Vec<String>,
        /// Strings that must not appear (secrets, ids).
        #[serde(default)]
        message_lacks: Vec<String>,
        /// The envelope the target must use (default: either).
        #[serde(default)]
        envelope: Option<crate::suite::errors::Envelope>,
        /// The message must start with the full code (`<prefix>::<code>`).
        #[serde(default)]
        message_starts_with_code: bool,
    },
}

impl ErrorExpect {
    pub(crate) fn code(&self) -> &str {
        match self {
            ErrorExpect::Code(c) => c,
            ErrorExpect::Detailed { code, .. } => code,
        }
    }

    pub(crate) fn message_has(&self) -> &[String] {
        match self {
            ErrorExpect::Code(_) => &[],
            ErrorExpect::Detailed { message_has, .. } => message_has,
        }
    }

    pub(crate) fn message_lacks(&self) -> &[String] {
        match self {
            ErrorExpect::Code(_) => &[],
            ErrorExpect::Detailed { message_lacks, .. } => message_lacks,
        }
    }

    pub(crate) fn envelope(&self) -> Option<crate::suite::errors::Envelope> {
        match self {
            ErrorExpect::Code(_) => None,
            ErrorExpect::Detailed { envelope, .. } => *envelope,
        }
    }

    pub(crate) fn message_starts_with_code(&self) -> bool {
        match self {
            ErrorExpect::Code(_) => false,
            ErrorExpect::Detailed {
                message_starts_with_code,
                ..
            } => *message_starts_with_code,
        }
    }
}

impl Step {
    /// This step (and its nested ones) with every refinement whose
    /// requirement `holds` folded into its expected response.
    pub(crate) fn refined(&self, holds: &dyn Fn(&str) -> bool) -> Step {
        let mut s = self.clone();
        let extra: Vec<Value> = s
            .refine
            .iter()
            .filter(|(req, _)| holds(req))
            .map(|(_, m)| m.clone())
            .collect();
        if let (
            false,
            Some(Expect {
                response: Some(base),
                ..
            }),
        ) = (extra.is_empty(), s.expect.as_mut())
        {
            let mut all = vec![base.clone()];
            all.extend(extra);
            *base = serde_json::json!({ "$all": all });
        }
        if let Some(branches) = &mut s.parallel {
            for b in branches.iter_mut() {
                for step in b.iter_mut() {
                    *step = step.refined(holds);
                }
            }
        }
        s
    }

    /// This step (and its nested ones) lengthened by the floor its
    /// `stretch` names, where `value` (the target's profile) states one.
    pub(crate) fn stretched(&self, value: &dyn Fn(&str) -> Option<f64>) -> Step {
        let mut s = self.clone();
        if let Some(st) = &mut s.stretch {
            st.stated = value(&st.by);
            let units = st.stated.unwrap_or(0.0).max(0.0);
            let grow = |per_unit: f64| (units * per_unit).ceil();
            if let Some(ms) = &mut s.eventually_ms {
                *ms += grow(st.eventually_ms as f64) as u64;
            }
            if let Some(times) = &mut s.repeat {
                *times += grow(f64::from(st.repeat)) as u32;
            }
        }
        if let Some(branches) = &mut s.parallel {
            for b in branches.iter_mut() {
                for step in b.iter_mut() {
                    *step = step.stretched(value);
                }
            }
        }
        s
    }

    /// A label for reports: the name, else the function or action.
    pub(crate) fn label(&self, index: usize) -> String {
        let what = if let Some(t) = &self.trigger {
            format!("trigger {t}")
        } else if let Some(c) = &self.call {
            format!("call {c}")
        } else if let Some(a) = &self.action {
            format!("action {}", action_name(a))
        } else {
            "parallel".to_string()
        };
        match &self.name {
            Some(n) => format!("step {} ({n}: {what})", index + 1),
            None => format!("step {} ({what})", index + 1),
        }
    }

    /// Every step, this one and nested ones.
    pub(crate) fn walk<'a>(&'a self, out: &mut Vec<&'a Step>) {
        out.push(self);
        if let Some(branches) = &self.parallel {
            for b in branches {
                for s in b {
                    s.walk(out);
                }
            }
        }
    }
}

pub(crate) fn action_name(a: &Action) -> &'static str {
    match a {
        Action::LocateSandbox { .. } => "locate_sandbox",
        Action::RegisterForeign { .. } => "register_foreign",
        Action::DeclareTriggerType { .. } => "declare_trigger_type",
        Action::RestartWorker {} => "restart_worker",
        Action::StopWorker {} => "stop_worker",
        Action::StartSandbox {} => "start_sandbox",
        Action::WorkerLog {} => "worker_log",
        Action::WorkerExit { .. } => "worker_exit",
        Action::Subscribe { .. } => "subscribe",
        Action::Received {} => "received",
        Action::OpenChannel { .. } => "open_channel",
        Action::ChannelFrames { .. } => "channel_frames",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(yaml: &str) -> Step {
        serde_yaml::from_str(yaml).expect("a step")
    }

    #[test]
    fn a_refinement_is_checked_too_only_where_the_profile_meets_it() {
        let s = step(
            "trigger: run\nexpect: {response: {stdout: {$len: {max: 80000}}}}\nrefine:\n  \"stream_cap_bytes=16384\": {stdout: {$len: {min: 16000}}}\n",
        );
        let silent = s.refined(&|_| false);
        assert_eq!(
            silent.expect.and_then(|e| e.response),
            Some(json!({"stdout": {"$len": {"max": 80000}}})),
            "a silent profile keeps the check, without the figure"
        );
        let stated = s.refined(&|req| req == "stream_cap_bytes=16384");
        assert_eq!(
            stated.expect.and_then(|e| e.response),
            Some(json!({"$all": [
                {"stdout": {"$len": {"max": 80000}}},
                {"stdout": {"$len": {"min": 16000}}}
            ]})),
            "a stated value adds its figure to the check"
        );
    }

    #[test]
    fn a_stated_floor_stretches_the_wait_and_the_runs_and_no_floor_changes_nothing() {
        let s = step(
            "call: sandbox::list\neventually_ms: 20000\nrepeat: 5\nstretch: {by: idle_ttl_floor_secs, eventually_ms: 1000, repeat: 1}\n",
        );
        let floored = s.stretched(&|f| (f == "idle_ttl_floor_secs").then_some(30.0));
        assert_eq!(floored.eventually_ms, Some(50_000));
        assert_eq!(floored.repeat, Some(35));
        assert!(floored.stretch.as_ref().unwrap().note().contains("30"));
        for silent in [None, Some(0.0)] {
            let same = s.stretched(&|_| silent);
            assert_eq!((same.eventually_ms, same.repeat), (Some(20_000), Some(5)));
        }
        let unstated = s.stretched(&|_| None);
        assert!(
            unstated
                .stretch
                .unwrap()
                .note()
                .contains("states no `idle_ttl_floor_secs`"),
            "an unstated floor says where to state it"
        );
        let nested = step(
            "parallel:\n  - - call: sandbox::list\n      eventually_ms: 100\n      stretch: {by: f, eventually_ms: 10}\n",
        )
        .stretched(&|_| Some(2.5));
        assert_eq!(nested.parallel.unwrap()[0][0].eventually_ms, Some(125));
    }

    #[test]
    fn refinements_reach_nested_steps() {
        let s = step(
            "parallel:\n  - - trigger: run\n      expect: {response: {a: 1}}\n      refine: {keep: {b: 2}}\n",
        );
        let r = s.refined(&|_| true);
        let inner = &r.parallel.expect("branches")[0][0];
        assert_eq!(
            inner.expect.as_ref().and_then(|e| e.response.clone()),
            Some(json!({"$all": [{"a": 1}, {"b": 2}]}))
        );
    }
}
