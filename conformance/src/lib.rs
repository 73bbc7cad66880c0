//! Conformance suite and hermetic bench for code-runner-compatible workers.
//!
//! The bench (`engine` + `sandbox_double`, assembled by `bench`) lets a worker
//! run anywhere: no real engine, no KVM. See ARCHITECTURE.md.
//!
//! The suite (`suite`, reported by `report`) runs the golden cases, schema
//! snapshots and error tables of `golden/` against a target. See README.md.
pub mod bench;
pub mod bench_compare;
pub mod cli;
pub mod client;
pub mod config_double;
pub mod engine;
pub mod report;
pub mod sandbox_double;
pub mod suite;
pub mod trigger;
pub mod wait;
