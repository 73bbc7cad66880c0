//! Data channels a case opens from the suite's own client (action
//! `open_channel`), hands to the target (a run's `output`), and reads
//! (action `channel_frames`). Each channel's reader starts at once and
//! keeps every text frame with the time it came, until the case ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iii_sdk::IIIClient;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// How a case's reader reads.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReadMode {
    /// Every frame until the writer closes.
    #[default]
    All,
    /// The first frame, then the reader goes away (its socket closed).
    First,
}

/// One channel's frames, as they came.
#[derive(Default)]
struct Collected {
    frames: Mutex<Vec<(Value, Duration)>>,
    /// Set once the writer closed or the reader went away.
    done: Mutex<bool>,
    changed: Notify,
}

/// One open channel: what came, and the task that reads it.
struct Open {
    collected: Arc<Collected>,
    reader: tokio::task::JoinHandle<()>,
}

/// The open channels of one case run.
#[derive(Default)]
pub(crate) struct Channels {
    open: Mutex<BTreeMap<String, Open>>,
}

impl Drop for Channels {
    fn drop(&mut self) {
        for (_, open) in std::mem::take(&mut *lock(&self.open)) {
            open.reader.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Channels {
    /// Creates a channel named `name` and starts reading it: `{writer}`,
    /// the writer ref to hand over.
    pub(crate) async fn open(
        &self,
        client: &IIIClient,
        name: &str,
        mode: ReadMode,
    ) -> Result<Value, String> {
        let channel = iii_sdk::helpers::create_channel(client, None)
            .await
            .map_err(|e| format!("engine::channels::create failed: {e}"))?;
        let writer = serde_json::to_value(&channel.writer_ref).map_err(|e| e.to_string())?;
        let collected = Arc::new(Collected::default());
        let started = Instant::now();
        let reader = channel.reader;
        let c = collected.clone();
        reader
            .on_message(move |text| {
                let frame = serde_json::from_str(&text).unwrap_or(Value::String(text));
                lock(&c.frames).push((frame, started.elapsed()));
                c.changed.notify_waiters();
            })
            .await;
        let c = collected.clone();
        let task = tokio::spawn(async move {
            loop {
                let got_one = !lock(&c.frames).is_empty();
                if mode == ReadMode::First && got_one {
                    break;
                }
                let next = reader.next_binary();
                let notified = c.changed.notified();
                tokio::select! {
                    r = next => match r {
                        Ok(Some(_)) => continue,
                        _ => break,
                    },
                    _ = notified, if mode == ReadMode::First => continue,
                }
            }
            // The reader goes away with this task (its socket is dropped).
            drop(reader);
            *lock(&c.done) = true;
            c.changed.notify_waiters();
        });
        lock(&self.open).insert(
            name.to_string(),
            Open {
                collected,
                reader: task,
            },
        );
        Ok(json!({ "writer": writer }))
    }

    /// What channel `name` carried, once its end frame came or its reader
    /// is done, or after `wait`: `{frames, types, seqs, stdout, stderr,
    /// end, first_frame_ms, done}`.
    pub(crate) async fn frames(&self, name: &str, wait: Duration) -> Result<Value, String> {
        let collected = lock(&self.open)
            .get(name)
            .map(|o| o.collected.clone())
            .ok_or_else(|| format!("no channel `{name}` was opened (action open_channel)"))?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = collected.changed.notified();
            let ended = lock(&collected.frames)
                .iter()
                .any(|(f, _)| f.get("type") == Some(&json!("end")));
            if ended || *lock(&collected.done) {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let frames = lock(&collected.frames).clone();
        let text = |kind: &str| -> String {
            frames
                .iter()
                .filter(|(f, _)| f.get("type") == Some(&json!(kind)))
                .filter_map(|(f, _)| f.get("data").and_then(Value::as_str))
                .collect()
        };
        Ok(json!({
            "frames": frames.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>(),
            "types": frames.iter().map(|(f, _)| f.get("type").cloned().unwrap_or(Value::Null)).collect::<Vec<_>>(),
            "seqs": frames.iter().map(|(f, _)| f.get("seq").cloned().unwrap_or(Value::Null)).collect::<Vec<_>>(),
            "stdout": text("stdout"),
            "stderr": text("stderr"),
            "end": frames.iter().find(|(f, _)| f.get("type") == Some(&json!("end"))).map(|(f, _)| f.clone()),
            "first_frame_ms": frames.first().map(|(_, at)| at.as_millis() as u64),
            "done": *lock(&collected.done),
        }))
    }
}
