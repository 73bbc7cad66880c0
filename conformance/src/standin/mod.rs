//! The stand-ins tests run on: a stand-in iii engine, an iii-sandbox double,
//! a config double, and the [`stack::Stack`] that assembles them in one
//! process. Nothing here knows golden cases; the suite runs against it.
pub mod client;
pub(crate) mod config_double;
pub mod engine;
pub mod host;
pub mod install;
pub mod sandbox_double;
pub mod stack;
pub mod wait;
