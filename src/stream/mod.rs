//! A run's stdout and stderr, streamed to the data channel its caller
//! handed over (`output`) while the run goes on.
//!
//! The daemon's `sandbox::exec` answers only at its end, so the run's exec
//! tees its output into a copy inside the VM (`guest/stream/tee.sh`, before
//! the run's own command) that follower execs read beside it (`follow`);
//! its answer, unchanged, brings what they had not read. The frames go to
//! the caller's writer from one task per run through a bounded queue (`sink`): a slow or gone reader loses frames
//! (the answer says how many), never time of the run or of the worker.
//! Each streamed run's recent frames are also kept, bounded, for whoever
//! holds its writer ref to `watch` (`tail`).

mod follow;
pub mod frames;
mod sink;
mod tail;

pub(crate) use follow::StreamTo;
pub use sink::Sink;
pub use tail::{Tail, Tails, WatchFrame, Watched};

/// What of each stream is streamed; past it, the rest is only in the
/// answer (`OutputSummary::cut`). Bounds what a streamed run holds in its
/// VM's memory (the copies live in its `/tmp`).
pub const STREAMED_BYTES: u64 = 4 << 20;

/// Set in a streamed run's env: python's wrappers then flush stdout at
/// each line (`guest/python/shared.py`), as a terminal would.
pub(crate) const STREAMED_ENV: &str = "SCR_STREAMED";

#[cfg(test)]
pub(crate) mod testing {
    //! What the stream's tests share.
    use std::future::Future;
    use std::pin::Pin;

    use crate::bus::{BusError, FrameWriter};

    /// A writer that hands every frame over, parsed, as it is sent.
    pub(crate) struct Noted(pub(crate) tokio::sync::mpsc::UnboundedSender<serde_json::Value>);

    impl FrameWriter for Noted {
        fn send(
            &self,
            text: String,
        ) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
            let _ = self.0.send(serde_json::from_str(&text).unwrap());
            Box::pin(async { Ok(()) })
        }
        fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(async {})
        }
    }
}
