//! `sandbox-code-runner::teardown`.

use serde_json::Value;

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::ids::{Namespace, RuntimeId};
use crate::runtime::Manager;
use crate::tenancy::Caller;
use crate::wire::{decode, schema_of, TeardownRequest, TeardownResponse};

pub fn spec() -> FunctionSpec {
    FunctionSpec {
        id: super::TEARDOWN.into(),
        description: Some(
            "Stop a runtime and unregister its functions. Pass exactly one of runtime_id (a kept \
             run's runtime) or namespace (every runtime backing a register_function namespace)."
                .into(),
        ),
        request_format: Some(schema_of::<TeardownRequest>()),
        response_format: Some(schema_of::<TeardownResponse>()),
        metadata: None,
    }
}

const EXACTLY_ONE: &str = "pass exactly one of `runtime_id` (to stop a kept run's runtime) or `namespace` (to stop every runtime of a register_function namespace)";

pub async fn handle(
    m: &Manager,
    caller: &Caller,
    payload: Value,
) -> Result<TeardownResponse, WorkerError> {
    let req: TeardownRequest = decode(payload)?;
    match (req.runtime_id.as_deref(), req.namespace.as_deref()) {
        (Some(id), None) => Ok(m.teardown_runtime(&RuntimeId::from_caller(id)).await?),
        (None, Some(ns)) => {
            let ns = Namespace::parse(ns).map_err(|e| WorkerError::invalid("namespace", e))?;
            Ok(m.teardown_namespace_as(caller, &ns).await?)
        }
        (Some(_), Some(_)) => Err(WorkerError::InvalidRequest(format!(
            "got both; {EXACTLY_ONE}"
        ))),
        (None, None) => Err(WorkerError::InvalidRequest(format!(
            "got neither; {EXACTLY_ONE}"
        ))),
    }
}
