//! Conformance suite and hermetic bench for code-runner-compatible workers.
//!
//! The bench (`engine` + `sandbox_double`, assembled by `bench`) lets a worker
//! run anywhere: no real engine, no KVM. See ARCHITECTURE.md.
pub mod bench;
pub mod cli;
pub mod client;
pub mod engine;
pub mod sandbox_double;
pub mod trigger;
