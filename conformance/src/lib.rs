//! Conformance suite and hermetic bench for code-runner-compatible workers.
pub mod engine;
