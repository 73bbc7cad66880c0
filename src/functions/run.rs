//! `sandbox-code-runner::run`.

use serde_json::Value;

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::ids::RuntimeId;
use crate::runtime::{Keep, Manager, MAX_SOURCE_BYTES};
use crate::tenancy::Caller;
use crate::wire::{decode, schema_of, RunRequest, RunResponse};

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
    match req.runtime_id.as_deref() {
        Some(id) => Ok(m
            .run_in(
                &RuntimeId::from_caller(id),
                req.lang,
                req.session,
                &req.code,
                timeout,
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
            Ok(m.run_fresh_as(caller, lang, &req.code, keep, timeout)
                .await?)
        }
    }
}
