//! sandbox-code-runner: run Node.js and Python in iii-sandbox microVMs, as an
//! iii worker. Every execution is delegated to `sandbox::*`; this crate only
//! validates, keeps runtime records, and frames guest I/O.
//!
//! See ARCHITECTURE.md for the code map and the invariants.

pub mod bus;
pub mod config;
mod daemon_limits;
pub mod error;
pub mod events;
pub mod function_ids;
pub mod functions;
pub mod guest;
pub mod guest_access;
pub mod guest_listener;
mod guest_policy;
#[cfg(test)]
mod host_run;
pub mod ids;
mod metering;
pub mod nodelay;
mod notified;
mod prestart;
mod python_sdk;
mod run_result;
pub mod runtime;
pub mod sandbox;
pub mod seal;
mod session;
pub mod settings;
mod stats;
pub mod stream;
pub mod tenancy;
pub mod ui;
mod wire;
