//! Connecting a short-lived SDK client with a name no other live worker has.

use std::time::Duration;

use iii_sdk::runtime::WorkerMetadata;
use iii_sdk::{register_worker, IIIClient, InitOptions, WorkerIdentityMode};

/// Connects with `prefix:<random>` as the worker name: the engine closes a
/// second live connection that reuses a name, so every client gets its own.
pub async fn connect(url: &str, prefix: &str) -> Result<IIIClient, iii_sdk::Error> {
    let name = format!("{prefix}:{:08x}", rand::random::<u32>());
    let metadata = WorkerMetadata {
        name,
        telemetry: None,
        ..WorkerMetadata::default()
    };
    let client = register_worker(
        url,
        InitOptions {
            metadata: Some(metadata),
            identity: WorkerIdentityMode::Explicit,
            ..InitOptions::default()
        },
    );
    client
        .wait_until_registered(Duration::from_secs(10))
        .await?;
    Ok(client)
}
