//! Executes one case: its steps in order (parallel branches concurrently),
//! captures, expectations, timing bounds, and cleanup steps that always run.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, BoxFuture};
use futures_util::FutureExt;
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::FunctionRef;
use serde_json::{json, Value};

use super::case::{Action, Case, ErrorExpect, Step};
use super::env::Env;
use super::errors::{classify, Envelope, Observed};
use super::matcher::{brief, Matcher};
use super::vars::{Splice, Vars};
use crate::standin::wait::Deadline;

mod channels;
mod diagnostics;
mod foreign;
pub(crate) mod timing;
pub(crate) use channels::{Channels, ReadMode};
pub use diagnostics::*;

/// Default client-side deadline of one call.
pub(crate) const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// Poll interval of `eventually_ms`.
const POLL: Duration = Duration::from_millis(50);

/// What a case's run produced, before expectations are applied.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawOutcome {
    pub(crate) failure: Option<String>,
    pub(crate) envelopes: BTreeMap<Envelope, u32>,
    /// Every error a call saw: `(case id, classification)`.
    pub(crate) observed: Vec<(String, Observed)>,
    pub(crate) notes: Vec<String>,
}

/// The state of one case run.
pub(crate) struct CaseRun<'a> {
    pub(crate) case_id: &'a str,
    pub(crate) prefix: &'a str,
    pub(crate) env: &'a Env,
    vars: Mutex<Vars>,
    envelopes: Mutex<BTreeMap<Envelope, u32>>,
    observed: Mutex<Vec<(String, Observed)>>,
    foreign: Mutex<Vec<FunctionRef>>,
    trigger_types: Mutex<Vec<String>>,
    /// Subscriber functions and their bindings (action `subscribe`).
    subscriptions: Mutex<Vec<(FunctionRef, iii_sdk::trigger::Trigger)>>,
    /// What the subscribers received, in arrival order.
    received: std::sync::Arc<Mutex<Vec<Value>>>,
    /// Data channels the case opened (action `open_channel`).
    channels: channels::Channels,
}

/// The owner side of a trigger type a case declares: accepts every binding.
struct AcceptBindings;

#[async_trait::async_trait]
impl iii_sdk::trigger::TriggerHandler for AcceptBindings {
    async fn register_trigger(
        &self,
        _config: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        Ok(())
    }

    async fn unregister_trigger(
        &self,
        _config: iii_sdk::trigger::TriggerConfig,
    ) -> Result<(), iii_sdk::Error> {
        Ok(())
    }
}

/// What a call or action came back with.
enum Outcome {
    Response(Value),
    Error {
        code: String,
        message: String,
    },
    /// The client itself failed (timeout, disconnect).
    Transport(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<'a> CaseRun<'a> {
    pub(crate) fn new(case_id: &'a str, prefix: &'a str, env: &'a Env, vars: Vars) -> CaseRun<'a> {
        CaseRun {
            case_id,
            prefix,
            env,
            vars: Mutex::new(vars),
            envelopes: Mutex::new(BTreeMap::new()),
            observed: Mutex::new(Vec::new()),
            foreign: Mutex::new(Vec::new()),
            trigger_types: Mutex::new(Vec::new()),
            subscriptions: Mutex::new(Vec::new()),
            received: Default::default(),
            channels: Default::default(),
        }
    }

    /// Runs steps then cleanup; returns the raw outcome.
    pub(crate) async fn run(self, case: &Case) -> RawOutcome {
        let failure = self.run_steps(&case.steps).await.err();
        let mut notes = Vec::new();
        for (i, s) in case.cleanup.iter().enumerate() {
            if let Err(e) = self.run_step(s).await {
                notes.push(format!("cleanup {}: {e}", s.label(i)));
            }
        }
        for f in lock(&self.foreign).drain(..) {
            f.unregister();
        }
        for (f, t) in lock(&self.subscriptions).drain(..) {
            t.unregister();
            f.unregister();
        }
        for t in lock(&self.trigger_types).drain(..) {
            #[allow(deprecated)] // the engine speaks trigger types
            self.env.client.unregister_trigger_type(t);
        }
        RawOutcome {
            failure,
            envelopes: std::mem::take(&mut *lock(&self.envelopes)),
            observed: std::mem::take(&mut *lock(&self.observed)),
            notes,
        }
    }

    fn run_steps<'b>(&'b self, steps: &'b [Step]) -> BoxFuture<'b, Result<(), String>> {
        async move {
            for (i, s) in steps.iter().enumerate() {
                self.run_step(s).await.map_err(|e| {
                    let floor = s.stretch.as_ref().map(|st| st.note()).unwrap_or_default();
                    format!("{}: {e}{floor}", s.label(i))
                })?;
            }
            Ok(())
        }
        .boxed()
    }

    async fn run_step(&self, step: &Step) -> Result<(), String> {
        if let Some(branches) = &step.parallel {
            let results = join_all(branches.iter().map(|b| self.run_steps(b))).await;
            let failures: Vec<String> = results
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| r.err().map(|e| format!("branch {}: {e}", i + 1)))
                .collect();
            return if failures.is_empty() {
                Ok(())
            } else {
                Err(failures.join("; "))
            };
        }
        if let Some(times) = step.repeat {
            for i in 0..times {
                lock(&self.vars).set("i", json!(i));
                self.run_step_once(step)
                    .await
                    .map_err(|e| format!("repetition {i}: {e}"))?;
            }
            return Ok(());
        }
        self.run_step_once(step).await
    }

    async fn run_step_once(&self, step: &Step) -> Result<(), String> {
        let deadline = step
            .eventually_ms
            .map(|ms| (ms, Deadline::after(Duration::from_millis(ms), POLL)));
        loop {
            match self.attempt(step).await {
                Ok(()) => return Ok(()),
                Err(e) => match &deadline {
                    Some((_, d)) if d.tick().await => {}
                    Some((ms, _)) => return Err(format!("still failing after {ms} ms: {e}")),
                    None => return Err(e),
                },
            }
        }
    }

    fn fill(&self, s: &str) -> Result<String, String> {
        lock(&self.vars)
            .fill_str(s, Splice::Text)
            .map_err(|e| e.to_string())
    }

    async fn attempt(&self, step: &Step) -> Result<(), String> {
        let started = Instant::now();
        let running = self.env.running.load(Ordering::Relaxed);
        let (outcome, is_target) = if let Some(suffix) = &step.trigger {
            let id = format!("{}::{}", self.prefix, self.fill(suffix)?);
            (self.call(&id, step).await?, true)
        } else if let Some(id) = &step.call {
            let id = self.fill(id)?;
            (self.call(&id, step).await?, false)
        } else if let Some(action) = &step.action {
            (self.action(action).await, false)
        } else {
            return Err("empty step".into());
        };
        let elapsed = started.elapsed();
        // Where the time went, for a timing failure (see `timing`).
        let window = || timing::Window {
            env: self.env,
            from: started,
            to: started + elapsed,
            others: running
                .max(self.env.running.load(Ordering::Relaxed))
                .saturating_sub(1),
        };
        let client_failed = matches!(outcome, Outcome::Transport(_));

        if let Outcome::Error { code, message } = &outcome {
            let o = classify(self.prefix, code, message);
            let record = match &o {
                Observed::Target { envelope, .. } => {
                    *lock(&self.envelopes).entry(*envelope).or_default() += 1;
                    true
                }
                Observed::Engine(_) => is_target,
                Observed::Unclassified { .. } => is_target,
            };
            if record {
                lock(&self.observed).push((self.case_id.to_string(), o));
            }
        }

        let value = self.judge(step, outcome).map_err(|e| {
            if client_failed {
                format!("{e}{}", window().explain())
            } else {
                e
            }
        })?;

        if let Some(ms) = step.within_ms {
            if elapsed > Duration::from_millis(ms) {
                return Err(format!(
                    "took {} ms, the bound is {ms} ms{}",
                    elapsed.as_millis(),
                    window().explain()
                ));
            }
        }
        if let Some(ms) = step.after_ms {
            if elapsed < Duration::from_millis(ms) {
                return Err(format!(
                    "took {} ms, it must take at least {ms} ms",
                    elapsed.as_millis()
                ));
            }
        }
        if !step.capture.is_empty() {
            let Some(v) = value else {
                return Err("nothing to capture from an error".into());
            };
            let mut vars = lock(&self.vars);
            for (name, pointer) in &step.capture {
                let got = v.pointer(pointer).ok_or_else(|| {
                    format!(
                        "capture `{name}`: {pointer} is absent in {}",
                        brief(Some(&v))
                    )
                })?;
                vars.set(name.clone(), got.clone());
            }
        }
        Ok(())
    }

    /// Applies the step's expectation; returns the response when there is one.
    fn judge(&self, step: &Step, outcome: Outcome) -> Result<Option<Value>, String> {
        let expect = step.expect.as_ref();
        let error_expect = expect.and_then(|e| e.error.as_ref());
        let engine_expect = expect.and_then(|e| e.engine_error.as_ref());
        match outcome {
            Outcome::Transport(e) => Err(format!("the call failed in the client: {e}")),
            Outcome::Response(v) => {
                if let Some(want) = error_expect {
                    return Err(format!(
                        "expected error {}::{}, got a response\n{}",
                        self.prefix,
                        want.code(),
                        got_response(&v)
                    ));
                }
                if let Some(want) = engine_expect {
                    return Err(format!(
                        "expected engine error {want}, got a response\n{}",
                        got_response(&v)
                    ));
                }
                if let Some(spec) = expect.and_then(|e| e.response.as_ref()) {
                    let matcher = {
                        let vars = lock(&self.vars);
                        Matcher::parse(spec, &vars).map_err(|e| e.to_string())?
                    };
                    let mismatches = matcher.check(Some(&v));
                    if !mismatches.is_empty() {
                        let shown: Vec<String> =
                            mismatches.iter().take(6).map(|m| m.to_string()).collect();
                        return Err(format!(
                            "response does not match: {}{}\n{}",
                            shown.join("; "),
                            if mismatches.len() > 6 {
                                format!(" (+{} more)", mismatches.len() - 6)
                            } else {
                                String::new()
                            },
                            got_response(&v)
                        ));
                    }
                }
                Ok(Some(v))
            }
            Outcome::Error { code, message } => {
                let shown = || got_error(self.prefix, &code, &message);
                if let Some(want) = error_expect {
                    match classify(self.prefix, &code, &message) {
                        Observed::Target {
                            code: got,
                            envelope,
                        } if got == want.code() => {
                            if let Some(required) = want.envelope() {
                                if envelope != required {
                                    return Err(format!(
                                        "error {} travelled in the {} envelope, the contract says {}",
                                        shown(),
                                        envelope.as_str(),
                                        required.as_str()
                                    ));
                                }
                            }
                            let full = format!("{}::{}", self.prefix, got);
                            if want.message_starts_with_code() && !message.starts_with(&full) {
                                return Err(format!(
                                    "the error message does not start with {full}: {}",
                                    shown()
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "expected error {}::{}, got {}",
                                self.prefix,
                                want.code(),
                                shown()
                            ))
                        }
                    }
                    self.check_message(want, &message)?;
                    return Ok(None);
                }
                if let Some(want) = engine_expect {
                    if &code == want {
                        return Ok(None);
                    }
                    return Err(format!("expected engine error {want}, got {}", shown()));
                }
                Err(format!("expected a response, got error {}", shown()))
            }
        }
    }

    fn check_message(&self, want: &ErrorExpect, message: &str) -> Result<(), String> {
        for token in want.message_has() {
            let token = self.fill(token)?;
            if !message.contains(&token) {
                return Err(format!(
                    "the error message lacks `{token}`: {}",
                    message.chars().take(300).collect::<String>()
                ));
            }
        }
        for token in want.message_lacks() {
            let token = self.fill(token)?;
            if !token.is_empty() && message.contains(&token) {
                return Err(format!(
                    "the error message carries `{token}`, which it must not"
                ));
            }
        }
        Ok(())
    }

    async fn call(&self, function_id: &str, step: &Step) -> Result<Outcome, String> {
        let payload = {
            let vars = lock(&self.vars);
            vars.fill_payload(step.payload.as_ref().unwrap_or(&json!({})))
                .map_err(|e| e.to_string())?
        };
        Ok(self
            .trigger(
                function_id,
                payload,
                step.timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS),
            )
            .await)
    }

    async fn trigger(&self, function_id: &str, payload: Value, timeout_ms: u64) -> Outcome {
        let r = self
            .env
            .client
            .trigger(TriggerRequest {
                function_id: function_id.to_string(),
                payload,
                action: None,
                timeout_ms: Some(timeout_ms),
            })
            .await;
        match r {
            Ok(v) => Outcome::Response(v),
            Err(iii_sdk::Error::Remote { code, message, .. }) => Outcome::Error { code, message },
            Err(e) => Outcome::Transport(e.to_string()),
        }
    }

    async fn action(&self, action: &Action) -> Outcome {
        let r = match action {
            Action::LocateSandbox { file } => match self.fill(file) {
                Ok(f) => self.locate_sandbox(&f).await,
                Err(e) => Err(e),
            },
            Action::RegisterForeign { function_id } => match self.fill(function_id) {
                Ok(f) => self.register_foreign(&f).await,
                Err(e) => Err(e),
            },
            Action::DeclareTriggerType { id } => match self.fill(id) {
                Ok(id) => {
                    #[allow(deprecated)] // the engine speaks trigger types
                    self.env.client.register_trigger_type_without_warning(
                        iii_sdk::RegisterTriggerType::new(
                            id.clone(),
                            "declared by code-runner-conformance",
                            AcceptBindings,
                        ),
                    );
                    lock(&self.trigger_types).push(id);
                    Ok(json!({ "declared": true }))
                }
                Err(e) => Err(e),
            },
            Action::RestartWorker {} => self.env.restart_worker().await.map_err(|e| e.to_string()),
            Action::StopWorker {} => self.env.stop_worker().await.map_err(|e| e.to_string()),
            Action::StartSandbox {} => self.env.start_sandbox().await.map_err(|e| e.to_string()),
            Action::WorkerLog {} => self
                .env
                .worker_log()
                .await
                .map(|log| json!({ "log": log }))
                .map_err(|e| e.to_string()),
            Action::Subscribe {
                trigger_type,
                config,
            } => {
                let config = match config {
                    Some(c) => lock(&self.vars).fill_payload(c).map(Some),
                    None => Ok(None),
                };
                match (self.fill(trigger_type), config) {
                    (Ok(t), Ok(c)) => self.subscribe(&t, c),
                    (Err(e), _) => Err(e),
                    (_, Err(e)) => Err(e.to_string()),
                }
            }
            Action::Received {} => {
                let events = lock(&self.received).clone();
                let kinds: Vec<Value> = events
                    .iter()
                    .map(|e| e.get("event").cloned().unwrap_or(Value::Null))
                    .collect();
                Ok(json!({ "events": events, "kinds": kinds }))
            }
            Action::OpenChannel { name, read } => match self.fill(name) {
                Ok(n) => self.channels.open(&self.env.client, &n, *read).await,
                Err(e) => Err(e),
            },
            Action::ChannelFrames { name, wait_ms } => match self.fill(name) {
                Ok(n) => {
                    let wait = Duration::from_millis(wait_ms.unwrap_or(10_000));
                    self.channels.frames(&n, wait).await
                }
                Err(e) => Err(e),
            },
            Action::WorkerExit { within_ms } => self
                .env
                .worker_exit(Duration::from_millis(*within_ms))
                .await
                .map_err(|e| e.to_string()),
        };
        match r {
            Ok(v) => Outcome::Response(v),
            Err(e) => Outcome::Transport(e),
        }
    }
}
