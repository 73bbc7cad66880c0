//! `sandbox-code-runner::run`.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::ids::RuntimeId;
use crate::runtime::{Keep, Manager, MAX_SOURCE_BYTES};
use crate::stream::Sink;
use crate::tenancy::Caller;
use crate::wire::{decode, schema_of, ChannelRef, RunRequest, RunResponse};

pub fn spec() -> FunctionSpec {
    FunctionSpec {
        id: super::RUN.into(),
        description: Some(
            "Run Node.js or Python in an iii-sandbox microVM. One-shot by default: the VM is \
             destroyed before the answer and no runtime_id is returned. keep: true keeps the VM \
             and returns its runtime_id (a secret) for later runs: files persist, variables do \
             not, unless the kept run asked for a session (session: true: later runs share its \
             interpreter and globals). A failing script is a response (success: false), not an error."
                .into(),
        ),
        request_format: Some(schema_of::<RunRequest>()),
        response_format: Some(schema_of::<RunResponse>()),
        metadata: None,
    }
}

pub async fn handle(
    m: &Manager,
    caller: &Caller,
    payload: Value,
) -> Result<RunResponse, WorkerError> {
    let req: RunRequest = decode(payload)?;
    if req.code.is_empty() {
        return Err(WorkerError::invalid("code", "must not be empty"));
    }
    if req.code.len() > MAX_SOURCE_BYTES {
        return Err(WorkerError::invalid("code", "is larger than 1 MiB"));
    }
    let timeout = m.config().clamp_timeout(req.timeout_ms);
    let sink = match &req.output {
        Some(channel) => Some(open_output(m, channel, timeout)?),
        None => None,
    };
    let answer = run(m, caller, &req, timeout, sink.as_ref()).await;
    let Some(sink) = sink else {
        return answer;
    };
    let verdict = match &answer {
        Ok(r) => {
            json!({"exit_code": r.exit_code, "success": r.success, "duration_ms": r.duration_ms})
        }
        Err(e) => {
            let (code, message) = e.to_wire();
            json!({"error": {"code": code, "message": message}})
        }
    };
    let summary = sink.end(verdict);
    answer.map(|r| RunResponse {
        output: Some(summary),
        ..r
    })
}

/// The caller's writer for `output`: a ref that is not a writer's is
/// `invalid_request` naming the field.
fn open_output(
    m: &Manager,
    channel: &ChannelRef,
    timeout_ms: u64,
) -> Result<Arc<Sink>, WorkerError> {
    if channel.direction != "write" {
        return Err(WorkerError::invalid(
            "output.direction",
            format!(
                "is `{}`: pass the writer ref of a channel (direction `write`)",
                channel.direction
            ),
        ));
    }
    if channel.channel_id.is_empty() || channel.access_key.is_empty() {
        return Err(WorkerError::invalid(
            "output",
            "needs the channel's `channel_id` and `access_key`",
        ));
    }
    let writer = m
        .bus()
        .open_writer(channel)
        .map_err(|e| WorkerError::invalid("output", e.message))?;
    // The run's budget, and room for a VM to boot and an SDK to install.
    let budget = std::time::Duration::from_millis(
        timeout_ms.saturating_add(m.config().sdk_install_timeout_ms),
    );
    let sink = Sink::start(writer, budget);
    // Its recent frames, for `watch` (past the cap of running tails, the
    // run streams unwatched).
    Ok(Arc::new(match m.tails().open(channel) {
        Some(tail) => sink.watched(tail),
        None => sink,
    }))
}

async fn run(
    m: &Manager,
    caller: &Caller,
    req: &RunRequest,
    timeout: u64,
    sink: Option<&Arc<Sink>>,
) -> Result<RunResponse, WorkerError> {
    match req.runtime_id.as_deref() {
        Some(id) => Ok(m
            .run_in(
                &RuntimeId::from_caller(id),
                req.lang,
                req.session,
                &req.code,
                timeout,
                sink,
            )
            .await?),
        None => {
            let lang = req.lang.ok_or_else(|| {
                WorkerError::invalid("lang", "is required when `runtime_id` is omitted")
            })?;
            let keep = match (req.keep, req.session) {
                (false, Some(true)) => {
                    return Err(WorkerError::invalid(
                        "session",
                        "needs `keep: true`: a one-shot run has no later runs to keep its \
                         globals for",
                    ))
                }
                (false, _) => Keep::Nothing,
                (true, asked) if asked.unwrap_or(m.config().sessions) => Keep::Session,
                (true, _) => Keep::Files,
            };
            Ok(m.run_fresh_as(caller, lang, &req.code, keep, timeout, sink)
                .await?)
        }
    }
}
