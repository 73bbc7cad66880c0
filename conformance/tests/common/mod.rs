//! Helpers shared by the conformance crate's integration tests.
#![allow(dead_code, unused_imports)]

pub mod sdk_cache;

use iii_sdk::IIIClient;

/// Connects a Rust SDK client with an explicit, unique worker name: two
/// clients in one process would otherwise share `host:pid` and the engine
/// would reject the second one.
pub async fn client(url: &str, name: &str) -> IIIClient {
    code_runner_conformance::standin::client::connect_named(url, name)
        .await
        .expect("client registers with the engine")
}

pub use code_runner_conformance::standin::wait::until as wait_for;
