//! The recent output of each streamed run, kept for `watch`: a bounded tail
//! of its data frames and its end frame, found by the run's writer ref.
//!
//! The run's `Sink` feeds its [`Tail`] every data frame it makes (the ones
//! a slow reader lost included) and the end frame. [`Tails`] is the
//! registry: an entry lives while its run streams and for a short while
//! after it ended, and is reached only with the writer ref's `access_key`
//! (compared in constant time). An unknown channel, an entry already
//! evicted and a wrong key look the same to the caller: `None`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use subtle::ConstantTimeEq;

use super::frames::Stream;
use crate::wire::ChannelRef;

/// Frame text a tail holds at most (bytes of `data`); older frames go first.
pub const TAIL_BYTES: usize = 64 << 10;
/// Data frames a tail holds at most.
pub const TAIL_FRAMES: usize = 256;
/// How long a run's tail stays reachable once its stream ended.
pub const ENDED_KEPT: Duration = Duration::from_secs(10);
/// Ended tails kept at most; past it the oldest ended are evicted first.
pub const ENDED_CAP: usize = 64;
/// Tails of running runs at most (each run holds a VM, so the worker's run
/// capacity bounds them first); a run past it streams unwatched.
pub const LIVE_CAP: usize = 256;

/// One data frame, as the channel's reader got it (or would have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct WatchFrame {
    pub seq: u64,
    /// Which of the run's streams the text came from.
    #[serde(rename = "type")]
    pub stream: Stream,
    pub data: String,
}

/// Output of `sandbox-code-runner::watch`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(title = "WatchResponse")]
pub struct Watched {
    /// The held data frames with `seq` past `after`, in order.
    pub frames: Vec<WatchFrame>,
    /// What to pass as `after` next time: the last `seq` answered (or the
    /// `after` given when nothing new came); absent while nothing has been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// Whether the run's stream ended: no frame will follow.
    pub ended: bool,
    /// The end frame, once sent: `{seq, type: "end", dropped, …}` with the
    /// run's verdict or error, as the channel's reader got it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Value>,
    /// Frames past `after` that the tail no longer holds (it keeps the
    /// last 64 KiB of text, at most 256 frames).
    pub skipped: u64,
}

/// One streamed run's recent frames.
#[derive(Default)]
pub struct Tail {
    state: Mutex<TailState>,
}

#[derive(Default)]
struct TailState {
    frames: VecDeque<WatchFrame>,
    /// Bytes of `data` in `frames`.
    bytes: usize,
    /// The sequence number of the next data frame.
    made: u64,
    end: Option<Value>,
    /// When the stream ended (the end frame, or the run's side gone).
    ended_at: Option<Instant>,
}

impl Tail {
    /// The data frame `seq` of `stream`; the oldest frames give way past
    /// the bounds (the newest is always kept).
    pub fn push(&self, seq: u64, stream: Stream, data: &str) {
        let mut s = self.lock();
        s.made = s.made.max(seq + 1);
        s.bytes += data.len();
        s.frames.push_back(WatchFrame {
            seq,
            stream,
            data: data.to_string(),
        });
        while s.frames.len() > 1 && (s.bytes > TAIL_BYTES || s.frames.len() > TAIL_FRAMES) {
            if let Some(old) = s.frames.pop_front() {
                s.bytes -= old.data.len();
            }
        }
    }

    /// The end frame, sent at `now`.
    pub fn end_at(&self, frame: &Value, now: Instant) {
        let mut s = self.lock();
        s.end = Some(frame.clone());
        s.ended_at.get_or_insert(now);
    }

    /// The end frame, sent now.
    pub fn end(&self, frame: &Value) {
        self.end_at(frame, Instant::now());
    }

    /// The run's side is gone: the stream has ended, with or without its
    /// end frame.
    pub fn close_at(&self, now: Instant) {
        self.lock().ended_at.get_or_insert(now);
    }

    fn ended_at(&self) -> Option<Instant> {
        self.lock().ended_at
    }

    /// What a watcher that has every frame up to `after` gets.
    pub fn read(&self, after: Option<u64>) -> Watched {
        let s = self.lock();
        let wanted = after.map_or(0, |a| a.saturating_add(1));
        let first_held = s.frames.front().map_or(s.made, |f| f.seq);
        let frames: Vec<WatchFrame> = s
            .frames
            .iter()
            .filter(|f| f.seq >= wanted)
            .cloned()
            .collect();
        Watched {
            next: frames.last().map(|f| f.seq).or(after),
            skipped: first_held.saturating_sub(wanted),
            frames,
            ended: s.ended_at.is_some(),
            end: s.end.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TailState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A registered tail and the key that reaches it (never printed: no
/// `Debug`).
struct Entry {
    key: String,
    tail: Arc<Tail>,
}

/// The tails of the streamed runs in progress or recently ended, by
/// channel id.
#[derive(Default)]
pub struct Tails {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Tails {
    /// A fresh tail for the run streaming to `channel`, or `None` when
    /// `LIVE_CAP` runs already stream (that run then streams unwatched).
    /// A later run to the same channel takes the entry over.
    pub fn open(&self, channel: &ChannelRef) -> Option<Arc<Tail>> {
        self.open_at(channel, Instant::now())
    }

    pub fn open_at(&self, channel: &ChannelRef, now: Instant) -> Option<Arc<Tail>> {
        let mut entries = self.lock();
        evict(&mut entries, now);
        let live = entries
            .values()
            .filter(|e| e.tail.ended_at().is_none())
            .count();
        if live >= LIVE_CAP {
            return None;
        }
        let tail = Arc::new(Tail::default());
        entries.insert(
            channel.channel_id.clone(),
            Entry {
                key: channel.access_key.clone(),
                tail: tail.clone(),
            },
        );
        Some(tail)
    }

    /// What the run behind `channel` streamed past `after`; `None` when no
    /// entry answers to the ref (unknown, evicted, or another key).
    pub fn read(&self, channel: &ChannelRef, after: Option<u64>) -> Option<Watched> {
        self.read_at(channel, after, Instant::now())
    }

    pub fn read_at(
        &self,
        channel: &ChannelRef,
        after: Option<u64>,
        now: Instant,
    ) -> Option<Watched> {
        let mut entries = self.lock();
        evict(&mut entries, now);
        let tail = match entries.get(&channel.channel_id) {
            Some(e) => keys_match(&e.key, &channel.access_key).then(|| e.tail.clone()),
            None => {
                // The same work as a wrong key, so the time says no more.
                let _ = keys_match(&channel.access_key, &channel.access_key);
                None
            }
        };
        drop(entries);
        tail.map(|t| t.read(after))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether two access keys are equal, in time that depends only on their
/// lengths.
fn keys_match(held: &str, given: &str) -> bool {
    !held.is_empty() && bool::from(held.as_bytes().ct_eq(given.as_bytes()))
}

/// Drops the entries that ended `ENDED_KEPT` ago or more, then the oldest
/// ended ones past `ENDED_CAP`.
fn evict(entries: &mut HashMap<String, Entry>, now: Instant) {
    entries.retain(|_, e| {
        e.tail
            .ended_at()
            .is_none_or(|at| now.saturating_duration_since(at) < ENDED_KEPT)
    });
    let mut ended: Vec<(Instant, String)> = entries
        .iter()
        .filter_map(|(id, e)| e.tail.ended_at().map(|at| (at, id.clone())))
        .collect();
    if ended.len() > ENDED_CAP {
        ended.sort();
        for (_, id) in &ended[..ended.len() - ENDED_CAP] {
            entries.remove(id);
        }
    }
}

#[cfg(test)]
mod tests;
