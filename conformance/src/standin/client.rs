//! Connecting short-lived SDK clients with names no other live worker has.

use std::time::Duration;

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::WorkerMetadata;
use iii_sdk::{register_worker, IIIClient, InitOptions, WorkerIdentityMode};
use serde_json::json;

/// Connects with `prefix:<random>` as the worker name: the engine closes a
/// second live connection that reuses a name, so every client gets its own.
pub async fn connect(url: &str, prefix: &str) -> Result<IIIClient, iii_sdk::Error> {
    connect_named(url, &format!("{prefix}:{:08x}", rand::random::<u32>())).await
}

/// Connects with exactly `name` (for doubles that stand in for a named worker).
pub async fn connect_named(url: &str, name: &str) -> Result<IIIClient, iii_sdk::Error> {
    let metadata = WorkerMetadata {
        name: name.to_string(),
        telemetry: None,
        ..WorkerMetadata::default()
    };
    let client = register_worker(
        url,
        InitOptions {
            metadata: Some(metadata),
            identity: WorkerIdentityMode::Explicit,
            // The harness's own spans are noise: a real engine with telemetry
            // off closes `/otel`, and the exporter would print an error per
            // batch over the suite's progress lines.
            otel: Some(iii_helpers::observability::OtelConfig {
                enabled: Some(false),
                ..Default::default()
            }),
            ..InitOptions::default()
        },
    );
    client
        .wait_until_registered(Duration::from_secs(10))
        .await?;
    Ok(client)
}

/// Waits until the engine routes `function_id` (its owner named itself).
pub async fn wait_routable(client: &IIIClient, function_id: &str, deadline: Duration) -> bool {
    super::wait::until(deadline, || async {
        client
            .trigger(TriggerRequest {
                function_id: "engine::functions::info".into(),
                payload: json!({ "function_id": function_id }),
                action: None,
                timeout_ms: Some(2_000),
            })
            .await
            .is_ok()
    })
    .await
}
