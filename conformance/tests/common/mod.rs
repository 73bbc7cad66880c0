//! Helpers shared by the conformance crate's integration tests.
#![allow(dead_code)]

use std::time::Duration;

use iii_sdk::runtime::WorkerMetadata;
use iii_sdk::{register_worker, IIIClient, InitOptions, WorkerIdentityMode};

/// Connects a Rust SDK client with an explicit, unique worker name: two
/// clients in one process would otherwise share `host:pid` and the engine
/// would reject the second one.
pub async fn client(url: &str, name: &str) -> IIIClient {
    let metadata = WorkerMetadata {
        name: name.to_string(),
        telemetry: None,
        ..WorkerMetadata::default()
    };
    let c = register_worker(
        url,
        InitOptions {
            metadata: Some(metadata),
            identity: WorkerIdentityMode::Explicit,
            ..InitOptions::default()
        },
    );
    c.wait_until_registered(Duration::from_secs(10))
        .await
        .expect("client registers with the engine");
    c
}

pub use code_runner_conformance::wait::until as wait_for;
