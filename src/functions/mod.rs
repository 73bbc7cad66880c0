//! One module per bus function: decode at the edge, call the manager,
//! encode. Nothing below here sees JSON requests.

pub mod register;
pub mod run;
pub mod teardown;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::bus::{Bus, FunctionSpec, Handler};
use crate::error::WorkerError;
use crate::runtime::Manager;

pub const RUN: &str = "sandbox-code-runner::run";
pub const REGISTER_FUNCTION: &str = "sandbox-code-runner::register_function";
pub const TEARDOWN: &str = "sandbox-code-runner::teardown";

fn encode<T: Serialize>(v: T) -> Result<Value, WorkerError> {
    serde_json::to_value(v)
        .map_err(|e| WorkerError::Engine(format!("cannot encode the response: {e}")))
}

/// Publishes the three functions, with their schemas.
pub fn publish_all(bus: &dyn Bus, manager: &Arc<Manager>) {
    let m = manager.clone();
    let run: Handler = Arc::new(move |p| {
        let m = m.clone();
        Box::pin(async move { encode(run::handle(&m, p).await?) })
    });
    bus.publish(run::spec(), run);

    let m = manager.clone();
    let register: Handler = Arc::new(move |p| {
        let m = m.clone();
        Box::pin(async move { encode(register::handle(&m, p).await?) })
    });
    bus.publish(register::spec(), register);

    let m = manager.clone();
    let teardown: Handler = Arc::new(move |p| {
        let m = m.clone();
        Box::pin(async move { encode(teardown::handle(&m, p).await?) })
    });
    bus.publish(teardown::spec(), teardown);
}

/// Every spec this worker publishes, for schema snapshots.
pub fn specs() -> Vec<FunctionSpec> {
    vec![run::spec(), register::spec(), teardown::spec()]
}
