//! `sandbox-code-runner::list_runtimes`: the operator's inventory. It names
//! runtimes by a non-secret handle only; no runtime id or sandbox id ever
//! appears in it (see `runtime::inventory`).

use serde_json::Value;

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::runtime::{Inventory, Manager};
use crate::wire::schema_of;

/// `list_runtimes` takes no arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ListRuntimesRequest {}

pub fn spec() -> FunctionSpec {
    FunctionSpec {
        id: super::LIST_RUNTIMES.into(),
        description: Some(
            "List live runtimes for operators: per runtime a non-secret handle (never its \
             runtime_id), kind (kept|namespace), lang, namespace and functions, created / last \
             used, idle TTL and reap time, executions, and VM liveness from one sandbox::list \
             (alive|gone|unknown). Also the warm pool per language and per-operation totals."
                .into(),
        ),
        request_format: Some(schema_of::<ListRuntimesRequest>()),
        response_format: Some(schema_of::<Inventory>()),
        metadata: None,
    }
}

/// Any payload is accepted: the function has no arguments.
pub async fn handle(m: &Manager, _payload: Value) -> Result<Inventory, WorkerError> {
    Ok(m.inventory().await)
}
