//! Conformance suite and hermetic stand-ins for code-runner-compatible workers.
//!
//! Two trees, each with one public face:
//! - [`suite`] is what a user runs: the golden cases, matchers, runner,
//!   reports and schema/error tables of `golden/`, checked against a target.
//! - [`standin`] is what tests run on: the stand-in engine, the iii-sandbox
//!   double, the config double and the [`standin::stack::Stack`] that
//!   assembles them, so a worker runs anywhere (no real engine, no KVM).
//!
//! [`cli`] is the `code-runner-conformance` command line over both;
//! `bench_compare` reads criterion results; `trigger` sends one call (both
//! crate-private, behind the CLI).
//! See README.md and ARCHITECTURE.md.
pub(crate) mod bench_compare;
pub mod cli;
pub mod standin;
pub mod suite;
pub(crate) mod trigger;
