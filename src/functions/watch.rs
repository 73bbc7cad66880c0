//! `sandbox-code-runner::watch`: the recent output of a streamed run in
//! progress (or ended moments ago), for whoever holds the run's `output`
//! writer ref. This worker's extension: code-runner has none.
//!
//! The ref's `access_key` is the capability, as it is for the channel: an
//! unknown channel, an ended run already evicted and a wrong key all get
//! the same `invalid_request` naming `output`, so the answer tells nothing
//! of which channels exist. Nothing here logs a ref.

use serde_json::Value;

use crate::bus::FunctionSpec;
use crate::error::WorkerError;
use crate::runtime::Manager;
use crate::stream::Watched;
use crate::wire::{decode, schema_of, WatchRequest};

pub fn spec() -> FunctionSpec {
    FunctionSpec {
        id: super::WATCH.into(),
        description: Some(
            "The recent output of a run streaming to `output` (the writer ref the run was given), \
             while it runs and for about 10 s after: its data frames past `after` (the last 64 KiB \
             of text, at most 256 frames), how many it no longer holds (`skipped`), and the end \
             frame once sent. Only the ref's holder reads it: an unknown, evicted or wrong ref is \
             invalid_request naming `output`."
                .into(),
        ),
        request_format: Some(schema_of::<WatchRequest>()),
        response_format: Some(schema_of::<Watched>()),
        metadata: None,
    }
}

pub async fn handle(m: &Manager, payload: Value) -> Result<Watched, WorkerError> {
    let req: WatchRequest = decode(payload)?;
    if req.output.direction != "write" {
        return Err(WorkerError::invalid(
            "output.direction",
            format!(
                "is `{}`: pass the writer ref the run was given (direction `write`)",
                req.output.direction
            ),
        ));
    }
    m.tails().read(&req.output, req.after).ok_or_else(|| {
        WorkerError::invalid(
            "output",
            "no streamed run in progress or ended in the last 10 s answers to this writer ref",
        )
    })
}
