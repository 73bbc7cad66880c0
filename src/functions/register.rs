//! `sandbox-code-runner::register_function`.

use serde_json::Value;

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::ids::FunctionId;
use crate::runtime::{Handler, Manager, MAX_DESCRIPTION_BYTES, MAX_SOURCE_BYTES};
use crate::tenancy::Caller;
use crate::wire::{check_format, decode, schema_of, RegisterRequest, RegisterResponse, Shown};

pub fn spec() -> FunctionSpec {
    FunctionSpec {
        id: super::REGISTER_FUNCTION.into(),
        description: Some(
            "Publish a bus function whose handler(payload) runs in an iii-sandbox microVM, a \
             fresh interpreter per call. The namespace (before `::`) gets one persistent \
             runtime per language; its functions stop resolving once it is torn down or reaped."
                .into(),
        ),
        request_format: Some(schema_of::<RegisterRequest>()),
        response_format: Some(schema_of::<RegisterResponse>()),
        metadata: None,
    }
}

pub async fn handle(
    m: &Manager,
    caller: &Caller,
    payload: Value,
) -> Result<RegisterResponse, WorkerError> {
    let req: RegisterRequest = decode(payload)?;
    let fid =
        FunctionId::parse(&req.function_id).map_err(|e| WorkerError::invalid("function_id", e))?;
    if req.source.trim().is_empty() {
        return Err(WorkerError::invalid("source", "must not be empty"));
    }
    if req.source.len() > MAX_SOURCE_BYTES {
        return Err(WorkerError::invalid("source", "is larger than 1 MiB"));
    }
    if req
        .description
        .as_ref()
        .is_some_and(|d| d.len() > MAX_DESCRIPTION_BYTES)
    {
        return Err(WorkerError::invalid(
            "description",
            "is longer than 4096 bytes",
        ));
    }
    let shown = Shown {
        description: req.description,
        request_format: check_format("request_format", req.request_format)?,
        response_format: check_format("response_format", req.response_format)?,
    };
    let handler = Handler {
        lang: req.lang,
        source: req.source,
        shown,
    };
    m.register_as(caller, fid, handler, super::handler_call::edge)
        .await
        .map_err(WorkerError::from)?;
    Ok(RegisterResponse {
        function_id: req.function_id,
        registered: true,
    })
}
