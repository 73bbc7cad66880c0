//! The bus handler of a published tenant function: decodes the call at the
//! edge, meters it as one `handler_call`, and gives the manager typed input.

use std::sync::{Arc, Weak};

use serde_json::Value;

use crate::bus::{FunctionSpec, Handler};
use crate::error::WorkerError;
use crate::ids::Lang;
use crate::metering::metered;
use crate::runtime::Manager;
use crate::wire::{HandlerPayload, Shown};

/// The spec and handler of a published tenant function `function_id`. The
/// handler holds the manager weakly: a published function does not keep a
/// shut-down worker alive.
pub(crate) fn edge(
    manager: Weak<Manager>,
    function_id: &str,
    lang: Lang,
    shown: Shown,
) -> (FunctionSpec, Handler) {
    let spec = FunctionSpec {
        id: function_id.to_string(),
        description: shown.description,
        request_format: shown.request_format,
        response_format: shown.response_format,
        metadata: Some(serde_json::json!({
            "worker": "sandbox-code-runner",
            "lang": lang.as_str(),
        })),
    };
    (spec, handler(manager, function_id.to_string()))
}

fn handler(manager: Weak<Manager>, function_id: String) -> Handler {
    Arc::new(move |payload: Value| {
        let manager = manager.clone();
        let function_id = function_id.clone();
        Box::pin(async move {
            match manager.upgrade() {
                Some(m) => {
                    let totals = m.stats().handler_call.clone();
                    let call = m.invoke(&function_id, HandlerPayload::decode(payload));
                    Ok(metered(&totals, call).await?)
                }
                None => Err(WorkerError::Engine("the worker is shutting down".into())),
            }
        })
    })
}
