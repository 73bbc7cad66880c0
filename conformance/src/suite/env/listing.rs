//! What the engine lists of a worker's functions: present, all listed, or
//! all gone (`engine::functions::info`, batch form).

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::IIIClient;
use serde_json::{json, Value};

/// The ids of `functions` the engine lists (in their order); `None` when
/// the engine could not be asked.
pub(crate) async fn functions_present(
    client: &IIIClient,
    functions: &[String],
) -> Option<Vec<String>> {
    let mut present = Vec::new();
    // The engine answers at most 32 ids per batch.
    for chunk in functions.chunks(32) {
        let answer = info_batch(client, chunk).await?;
        let entries = answer.get("functions")?.as_array()?;
        present.extend(
            entries
                .iter()
                .filter(|e| e.get("error").is_none())
                .filter_map(|e| e.get("function_id")?.as_str())
                .filter(|id| chunk.iter().any(|c| c == id))
                .map(str::to_string),
        );
    }
    Some(present)
}

/// `Some(true)` when every function is listed, `Some(false)` when one is
/// not, `None` when the engine could not be asked.
pub(crate) async fn functions_listed(client: &IIIClient, functions: &[String]) -> Option<bool> {
    let answer = info_batch(client, functions).await?;
    let entries = answer.get("functions")?.as_array()?;
    Some(
        entries.len() == functions.len()
            && entries
                .iter()
                .all(|e| e.get("error").is_none() && e.get("function_id").is_some()),
    )
}

/// Whether none of `functions` is listed any more.
pub(super) async fn functions_gone(client: &IIIClient, functions: &[String]) -> bool {
    let Some(answer) = info_batch(client, functions).await else {
        return false;
    };
    answer
        .get("functions")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().all(|e| e.get("error").is_some()))
}

/// `engine::functions::info` in its batch form; `None` when the engine could
/// not be asked.
async fn info_batch(client: &IIIClient, ids: &[String]) -> Option<Value> {
    client
        .trigger(TriggerRequest {
            function_id: "engine::functions::info".into(),
            payload: json!({ "function_ids": ids }),
            action: None,
            timeout_ms: Some(5_000),
        })
        .await
        .ok()
}
