//! Executing one job of a run: a golden case in its environment (shared or
//! private), or a schema snapshot, and turning the result into a report
//! entry judged against the expectations.

use super::*;
use std::sync::atomic::Ordering;

pub(super) fn provisional(r: &JobResult, exp: &Expectations) -> CaseReport {
    finalize(
        JobResult {
            id: r.id.clone(),
            level: r.level,
            duration: r.duration,
            failure: r.failure.clone(),
            skipped: r.skipped.clone(),
            envelopes: BTreeMap::new(),
            notes: Vec::new(),
            file: None,
            schema: None,
        },
        exp,
    )
}

pub(super) fn finalize(r: JobResult, exp: &Expectations) -> CaseReport {
    let (verdict, message, reason) = if let Some(skip) = r.skipped {
        (Verdict::Skip, None, Some(skip))
    } else {
        let passed = r.failure.is_none();
        let verdict = exp.verdict(&r.id, passed);
        let reason = exp.reason(&r.id).map(str::to_string);
        let message = match verdict {
            Verdict::Stale => Some(format!(
                "listed as a known failure ({}) but passed: the entry is stale, remove it",
                reason.as_deref().unwrap_or("")
            )),
            _ => r.failure,
        };
        (verdict, message, reason)
    };
    CaseReport {
        id: r.id,
        level: r.level,
        verdict,
        duration_ms: r.duration.as_millis() as u64,
        message,
        reason,
        envelopes: r.envelopes,
        notes: r.notes,
        file: r.file,
    }
}

pub(super) async fn run_case(ctx: &Context<'_>, case: &Case) -> JobResult {
    let started = Instant::now();
    let mut result = JobResult {
        id: case.id.clone(),
        level: Some(case.level),
        duration: Duration::ZERO,
        failure: None,
        skipped: None,
        envelopes: BTreeMap::new(),
        notes: Vec::new(),
        file: Some(case.file.display().to_string()),
        schema: None,
    };
    if case.level == Level::Profile {
        if let Some(why) = ctx.loaded.target.undeclared(&case.requires) {
            result.skipped = Some(why);
            return result;
        }
    }
    if let Some(why) = ctx.loaded.target.unmet(&case.requires) {
        result.skipped = Some(why);
        return result;
    }
    // The stand-ins cannot model what the case is about: a skip naming the fix,
    // never a failure charged to the worker.
    if let (Some(gap), true) = (ctx.stand_in_gap, !case.stand_in.is_empty()) {
        result.skipped = Some(gap.to_string());
        return result;
    }
    // A profile value the worker cannot honour was diagnosed at the start.
    if let Some(why) = ctx.fit.blocks(case) {
        result.failure = Some(why);
        return result;
    }
    let target = &ctx.loaded.target;
    let refined = case
        .refined(&|req| target.check(req).is_ok())
        .stretched(&|floor| target.number(floor));
    let case = &refined;
    // A function the profile lists but the target does not publish fails
    // the cases that need it, and only those.
    let needed = published::triggered(&case.all_steps());
    let missing: Vec<&String> = needed.iter().filter(|f| !ctx.published.has(f)).collect();
    if !missing.is_empty() {
        result.failure = Some(format!(
            "needs {}, which the target does not publish (its profile lists {})",
            missing
                .iter()
                .map(|f| format!("{}::{f}", ctx.prefix))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        ));
        return result;
    }
    let private = match &case.environment {
        None => None,
        Some(spec)
            if spec.sharpens_only && (ctx.private_ok.is_err() || ctx.worker_cmd.is_none()) =>
        {
            None
        }
        Some(spec) => {
            if let Err(why) = &ctx.private_ok {
                result.skipped = Some(why.clone());
                return result;
            }
            let Some(cmd) = &ctx.worker_cmd else {
                result.skipped = Some("no worker command for a private environment".into());
                return result;
            };
            // A case about the guest listener gets the target's layout of it.
            let guest = ctx
                .guest
                .as_ref()
                .filter(|_| case.requires.iter().any(|r| r == "guest_listener"));
            match Env::private(
                spec,
                cmd,
                ctx.functions.clone(),
                ctx.engine_bin.as_deref(),
                guest,
            )
            .await
            {
                Ok(e) => Some(e),
                Err(EnvError::Unavailable(why)) => {
                    result.skipped = Some(why);
                    return result;
                }
                Err(e) => {
                    result.failure = Some(format!("private environment: {}", e.chain()));
                    result.duration = started.elapsed();
                    return result;
                }
            }
        }
    };
    let env = private.as_ref().unwrap_or(ctx.env);
    let mut vars = Vars::new();
    vars.set("ns", json!(fresh_namespace()));
    vars.set("uuid", json!(uuid::Uuid::new_v4().to_string()));
    vars.set("prefix", json!(ctx.prefix));
    vars.set("case", json!(case.id));
    vars.set("engine_url", json!(env.url));
    // `${profile.<feature>}`: a value the target's profile declares (a case
    // using one requires the feature, so it is there).
    for (name, feature) in &ctx.loaded.target.profile {
        vars.set(format!("profile.{name}"), feature.value.clone());
    }
    let run = runner::CaseRun::new(&case.id, &ctx.prefix, env, vars);
    let running = env.running.fetch_add(1, Ordering::Relaxed) + 1;
    let began = Instant::now();
    let raw = match tokio::time::timeout(CASE_DEADLINE, run.run(case)).await {
        Ok(raw) => raw,
        Err(_) => {
            let window = runner::timing::Window {
                env,
                from: began,
                to: Instant::now(),
                others: running
                    .max(env.running.load(Ordering::Relaxed))
                    .saturating_sub(1),
            };
            runner::RawOutcome {
                failure: Some(format!(
                    "the case did not finish within {CASE_DEADLINE:?}{}",
                    window.explain()
                )),
                ..runner::RawOutcome::default()
            }
        }
    };
    env.running.fetch_sub(1, Ordering::Relaxed);
    if let Some(e) = private {
        e.shutdown().await;
    }
    ctx.observed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(raw.observed);
    result.failure = raw.failure;
    result.notes = raw.notes;
    result.envelopes = raw
        .envelopes
        .into_iter()
        .map(|(k, v)| (k.as_str().to_string(), v))
        .collect();
    result.duration = started.elapsed();
    result
}

pub(super) async fn run_schema(ctx: &Context<'_>, function: &str) -> JobResult {
    let started = Instant::now();
    let path = schema::golden_path(
        &ctx.loaded.golden.schemas(),
        &ctx.loaded.target.name,
        function,
    );
    let mut result = JobResult {
        id: format!("schema.{function}"),
        level: Some(Level::Recommended),
        duration: Duration::ZERO,
        failure: None,
        skipped: None,
        envelopes: BTreeMap::new(),
        notes: Vec::new(),
        file: Some(path.display().to_string()),
        schema: None,
    };
    let full = format!("{}::{function}", ctx.prefix);
    if !ctx.published.has(function) {
        result.failure = Some(format!(
            "the target does not publish {full} (its profile lists it)"
        ));
        return result;
    }
    let info = ctx
        .env
        .client
        .trigger(TriggerRequest {
            function_id: "engine::functions::info".into(),
            payload: json!({ "function_id": full }),
            action: None,
            timeout_ms: Some(10_000),
        })
        .await;
    let entry = match info {
        Ok(v) => v,
        Err(e) => {
            result.failure = Some(format!("engine::functions::info {full}: {e}"));
            result.duration = started.elapsed();
            return result;
        }
    };
    let live = schema::FunctionSchemas::from_entry(&entry);
    result.schema = Some((function.to_string(), live.normalized()));
    if ctx.bless {
        let golden_entry = json!({
            "name": ctx.loaded.target.function(function),
            "description": entry.get("description").cloned().unwrap_or(Value::Null),
            "metadata": entry.get("metadata").cloned().unwrap_or(json!({})),
            "request_schema": live.request,
            "response_schema": live.response,
        });
        if let Err(e) = schema::write_golden(&path, &golden_entry) {
            result.failure = Some(format!("cannot write {}: {e}", path.display()));
        } else {
            result.notes.push(format!("blessed {}", path.display()));
        }
        result.duration = started.elapsed();
        return result;
    }
    // A target nobody has taken schema snapshots of yet: nothing to compare.
    let dir = ctx.loaded.golden.schemas().join(&ctx.loaded.target.name);
    if !dir.is_dir() {
        result.skipped = Some(format!(
            "no schema snapshots for target `{}` yet ({} is missing): take them with `code-runner-conformance run --target {} --bless-schemas` (plus this run's mode flags), review and commit them",
            ctx.loaded.target.name,
            dir.display(),
            ctx.loaded.target.name
        ));
        result.duration = started.elapsed();
        return result;
    }
    match schema::load_golden(&path) {
        Err(e) => {
            result.failure = Some(format!(
                "{e} (generate it with `run --bless-schemas` and review the diff)"
            ))
        }
        Ok(g) => {
            let golden = schema::FunctionSchemas::from_entry(&g).normalized();
            let diffs = schema::differences(&golden, &live.normalized());
            if !diffs.is_empty() {
                let shown: Vec<String> = diffs.iter().take(10).cloned().collect();
                result.failure = Some(format!(
                    "schema drift in {full} against {}: {}{}",
                    path.display(),
                    shown.join("; "),
                    if diffs.len() > 10 {
                        format!(" (+{} more)", diffs.len() - 10)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    result.duration = started.elapsed();
    result
}
