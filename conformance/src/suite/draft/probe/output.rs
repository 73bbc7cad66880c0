//! The streaming probe: a python run given a data channel's writer as
//! `output` (a channel the probe makes and reads, as a case's
//! `open_channel` does), then what the channel carried: a stdout frame with
//! the run's line and an end frame mean the target streams
//! (`output_stream`).

use std::time::Duration;

use serde_json::{json, Value};

use super::{Answer, Prober};
use crate::suite::runner::{Channels, ReadMode};

/// How long the probe waits for the end frame after the run answered.
const END_WAIT: Duration = Duration::from_secs(5);

pub(super) async fn output_stream(p: &mut Prober<'_>) {
    let channels = Channels::default();
    let Ok(opened) = channels.open(p.client, "probe", ReadMode::All).await else {
        return;
    };
    let answer = p
        .target(
            "run",
            json!({"lang": "python", "code": "print('streamed')", "output": opened["writer"]}),
        )
        .await;
    let wait = match answer {
        Answer::Ok(_) => END_WAIT,
        _ => Duration::ZERO,
    };
    let Ok(seen) = channels.frames("probe", wait).await else {
        return;
    };
    let streamed = seen["stdout"] == json!("streamed\n") && seen["end"] != Value::Null;
    p.note(
        "output_stream",
        Prober::yes_no(streamed),
        if streamed {
            "a python run given a channel writer as `output` wrote its stdout there, then an end frame"
        } else {
            "a python run given a channel writer as `output` wrote no stdout frame and end frame there"
        },
    );
}
