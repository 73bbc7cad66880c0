//! The streaming probe: a python run given a data channel's writer as
//! `output` (a channel the probe makes), then what the channel carried: a
//! stdout frame with the run's line and an end frame mean the target
//! streams (`output_stream`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Answer, Prober};

/// How long the probe waits for the end frame after the run answered.
const END_WAIT: Duration = Duration::from_secs(5);

pub(super) async fn output_stream(p: &mut Prober<'_>) {
    let Ok(channel) = iii_sdk::helpers::create_channel(p.client, None).await else {
        return;
    };
    let Ok(writer) = serde_json::to_value(&channel.writer_ref) else {
        return;
    };
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = frames.clone();
    let ended = Arc::new(tokio::sync::Notify::new());
    let end = ended.clone();
    channel
        .reader
        .on_message(move |text| {
            let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let last = frame.get("type") == Some(&json!("end"));
            seen.lock().unwrap_or_else(|e| e.into_inner()).push(frame);
            if last {
                end.notify_one();
            }
        })
        .await;
    let reader = channel.reader;
    let reading =
        tokio::spawn(async move { while let Ok(Some(_)) = reader.next_binary().await {} });
    let answer = p
        .target(
            "run",
            json!({"lang": "python", "code": "print('streamed')", "output": writer}),
        )
        .await;
    if matches!(answer, Answer::Ok(_)) {
        let _ = tokio::time::timeout(END_WAIT, ended.notified()).await;
    }
    reading.abort();
    let frames = frames.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let kind = |f: &Value| {
        f.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let streamed = frames
        .iter()
        .any(|f| kind(f) == "stdout" && f.get("data") == Some(&json!("streamed\n")))
        && frames.iter().any(|f| kind(f) == "end");
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
