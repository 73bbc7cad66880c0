//! The frames of one streamed run, on their way to the caller's writer.
//!
//! The run's side never waits: a frame goes into a bounded queue or is
//! dropped (its sequence number is then missing from the stream). One task
//! per run empties the queue into the writer, each frame within a deadline;
//! a writer that fails or stalls past it is given up, and every later frame
//! is dropped. The end frame comes last, after every queued frame, and the
//! task then closes the writer and ends: nothing outlives the run by more
//! than the deadlines.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::frames::{data_frame, end_frame, Framer, Stream};
use super::tail::Tail;
use crate::bus::FrameWriter;
use crate::wire::OutputSummary;

/// Frames a run may have queued at once; past it frames are dropped.
const QUEUE_FRAMES: usize = 256;
/// Text of one data frame, at most (bytes); longer chunks are split.
const FRAME_BYTES: usize = 16 << 10;
/// How long one frame may take to reach the engine.
const SEND_DEADLINE: Duration = Duration::from_secs(5);
/// How long the writer task may outlive the run's budget, draining what
/// was queued: past it, whatever is left is dropped with the task.
const DRAIN: Duration = Duration::from_secs(30);

/// One streamed run's frames.
pub struct Sink {
    queue: Mutex<Queue>,
    held: tokio::sync::watch::Sender<bool>,
    dropped: std::sync::Arc<AtomicU64>,
    cut: AtomicBool,
}

struct Queue {
    tx: mpsc::Sender<Value>,
    framer: Framer,
    next_seq: u64,
    /// Taken by the one end frame.
    end: Option<oneshot::Sender<Value>>,
    /// Where `watch` reads the run's recent frames (every one made, the
    /// dropped included), if it is watched.
    tail: Option<Arc<Tail>>,
}

impl Sink {
    /// Starts the task that feeds `writer`, for a run of at most `budget`:
    /// the task ends by `budget` plus a drain allowance, whatever its
    /// reader does.
    pub fn start(writer: Box<dyn FrameWriter>, budget: Duration) -> Sink {
        let (tx, rx) = mpsc::channel(QUEUE_FRAMES);
        let (end_tx, end_rx) = oneshot::channel();
        let dropped = std::sync::Arc::new(AtomicU64::new(0));
        let (held, held_rx) = tokio::sync::watch::channel(false);
        let feeding = pump(writer, rx, end_rx, dropped.clone(), held_rx);
        tokio::spawn(async move {
            if tokio::time::timeout(budget + DRAIN, feeding).await.is_err() {
                tracing::debug!("an output stream's reader took too long; the rest is dropped");
            }
        });
        Sink {
            held,
            queue: Mutex::new(Queue {
                tx,
                framer: Framer::default(),
                next_seq: 0,
                end: Some(end_tx),
                tail: None,
            }),
            dropped,
            cut: AtomicBool::new(false),
        }
    }

    /// The same sink, also feeding `tail` (see `tail::Tails`).
    pub fn watched(mut self, tail: Arc<Tail>) -> Sink {
        self.queue.get_mut().unwrap_or_else(|p| p.into_inner()).tail = Some(tail);
        self
    }

    /// Bytes of `stream` taken in so far.
    pub fn seen(&self, stream: Stream) -> u64 {
        self.lock().framer.seen(stream)
    }

    /// The next bytes of `stream`.
    pub fn push(&self, stream: Stream, chunk: &[u8]) {
        let mut q = self.lock();
        if let Some(text) = q.framer.push(stream, chunk) {
            q.send(stream, &text, &self.dropped);
        }
    }

    /// Holds the frames (queued, not sent) while `held`: the worker is
    /// reading the rest of an exec's output that its answer brings anyway,
    /// and frames sent now would only compete with that read. `end`
    /// releases them too.
    pub fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }

    /// Notes that a stream passed what is streamed of it.
    pub fn mark_cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
    }

    /// Ends the stream with `verdict` (the answer's, or its error) in the
    /// end frame, after anything still held; says what became of the
    /// frames. The end frame is sent once whatever was queued before it
    /// has been.
    pub fn end(&self, verdict: Value) -> OutputSummary {
        self.hold(false);
        let mut q = self.lock();
        for stream in [Stream::Stdout, Stream::Stderr] {
            if let Some(text) = q.framer.finish(stream) {
                q.send(stream, &text, &self.dropped);
            }
        }
        let frames = q.next_seq;
        let summary = OutputSummary {
            frames,
            dropped: self.dropped.load(Ordering::Relaxed),
            cut: self.cut.load(Ordering::Relaxed),
        };
        let frame = end_frame(frames, verdict, summary.dropped);
        if let Some(tail) = &q.tail {
            tail.end(&frame);
        }
        if let Some(end) = q.end.take() {
            let _ = end.send(frame);
        }
        summary
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Sink {
    /// A run whose side is gone without an end frame (its caller gave up)
    /// still ends its tail, so the tail is evicted in time.
    fn drop(&mut self) {
        if let Some(tail) = &self.lock().tail {
            tail.close_at(std::time::Instant::now());
        }
    }
}

impl Queue {
    /// `text` as frames of at most `FRAME_BYTES` (cut on characters).
    fn send(&mut self, stream: Stream, mut text: &str, dropped: &AtomicU64) {
        while !text.is_empty() {
            let mut at = text.len().min(FRAME_BYTES);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let frame = data_frame(self.next_seq, stream, &text[..at]);
            if let Some(tail) = &self.tail {
                tail.push(self.next_seq, stream, &text[..at]);
            }
            self.next_seq += 1;
            if self.tx.try_send(frame).is_err() {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
            text = &text[at..];
        }
    }
}

/// Feeds `writer` every data frame until the run's side is done (the
/// `Sink` dropped), then the end frame, then closes it.
async fn pump(
    writer: Box<dyn FrameWriter>,
    mut rx: mpsc::Receiver<Value>,
    end: oneshot::Receiver<Value>,
    dropped: std::sync::Arc<AtomicU64>,
    mut held: tokio::sync::watch::Receiver<bool>,
) {
    // Connected while the run starts, not when its first output is ready.
    let mut alive = in_time(writer.open()).await;
    while let Some(frame) = rx.recv().await {
        let _ = held.wait_for(|h| !h).await;
        alive = offer(&*writer, frame, alive, &dropped).await;
    }
    if let Ok(last) = end.await {
        alive = offer(&*writer, last, alive, &dropped).await;
    }
    if alive {
        let _ = tokio::time::timeout(SEND_DEADLINE, writer.close()).await;
    }
    tracing::debug!(
        dropped = dropped.load(Ordering::Relaxed),
        "an output stream ended"
    );
}

/// Whether `step` (of the writer's) succeeded within [`SEND_DEADLINE`];
/// a reader that is gone or stalled is only logged.
async fn in_time(
    step: impl std::future::Future<Output = Result<(), crate::bus::BusError>>,
) -> bool {
    match tokio::time::timeout(SEND_DEADLINE, step).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e.message, "an output stream's reader is gone");
            false
        }
        Err(_) => {
            tracing::debug!("an output stream's reader stalled");
            false
        }
    }
}

/// `frame` to a writer that is still `alive`; whether it still is (one
/// that failed or stalled is given up, and the frame counted dropped, as
/// is every frame after it).
async fn offer(writer: &dyn FrameWriter, frame: Value, alive: bool, dropped: &AtomicU64) -> bool {
    let delivered = alive && in_time(writer.send(frame.to_string())).await;
    if !delivered {
        dropped.fetch_add(1, Ordering::Relaxed);
    }
    delivered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::testing::Noted;

    /// Frames made while the rest of an exec is read wait in the queue
    /// (none is lost), and go once the hold ends, or with the end frame.
    #[rstest::rstest]
    #[case::released(false)]
    #[case::ended(true)]
    #[tokio::test(start_paused = true)]
    async fn held_frames_wait_and_then_all_go(#[case] by_end: bool) {
        let (tx, mut sent) = tokio::sync::mpsc::unbounded_channel();
        let sink = Sink::start(Box::new(Noted(tx)), Duration::from_secs(5));
        sink.push(Stream::Stdout, b"live\n");
        let first = tokio::time::timeout(Duration::from_secs(1), sent.recv()).await;
        assert_eq!(first.unwrap().unwrap()["data"], "live\n");
        sink.hold(true);
        sink.push(Stream::Stdout, b"caught up\n");
        // Paused time: ten seconds pass at once (within the pump's
        // budget), with the pump free to run.
        let waited = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await;
        assert!(waited.is_err(), "a held frame was sent: {waited:?}");
        if by_end {
            sink.end(serde_json::json!({"exit_code": 0}));
        } else {
            sink.hold(false);
        }
        let next = tokio::time::timeout(Duration::from_secs(1), sent.recv()).await;
        assert_eq!(next.unwrap().unwrap()["data"], "caught up\n");
    }
}
