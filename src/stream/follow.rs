//! The VM's side of a streamed run: its exec writes the code's output to a
//! copy in the VM instead of to the exec's own streams
//! (`guest/stream/tee.sh`, put in front by `VmLease::exec` when an exec
//! carries a [`StreamTo`]), follower execs read the copy while the run
//! goes on (`guest/stream/follow.sh`), and once the exec has answered the
//! last ones take the rest. The exec's answer is then given the output the
//! followers read, cut where the daemon cuts, so the output crosses from
//! the VM once, and whatever reads the answer next (a relay's verdict, the
//! result frame) reads what it always did.
//!
//! A follower waits in the VM until the copy grows or the run's streams
//! end (polling every 20 ms, up to a second), so output reaches the worker
//! a poll and an exec after it was written, an idle run costs one exec a
//! second, and no follower outlives its run in the VM by more than a poll.

use std::future::Future;
use std::sync::{Arc, Mutex};

use base64::Engine as _;

use super::frames::Stream;
use super::{Sink, STREAMED_BYTES};
use crate::daemon_limits::DAEMON;
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

const TEE_SH: &str = include_str!("../../guest/stream/tee.sh");
const FOLLOW_SH: &str = include_str!("../../guest/stream/follow.sh");

/// Polls of 20 ms one follower exec waits for output before it answers.
const POLLS: u32 = 50;
/// What one follower exec reads of both streams together, at most: two
/// thirds of the exec output the worker can get back, so the read, in
/// base64, fits in one answer.
const READ_BYTES: usize = DAEMON.stream_cap_bytes.value * 2 / 3;
/// A follower exec's budget: its polls and its reads, with room.
const FOLLOW_TIMEOUT_MS: u64 = 5_000;
/// How long the follower in flight when the run's exec answers is waited
/// for (it answers within a poll of the streams' end).
const IN_FLIGHT_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// Where a streamed run's execs copy their output: put on the run's exec
/// (`ExecParams::stream`) and carried by every exec it becomes (a relay, a
/// cold start, a session's turn).
#[derive(Clone)]
pub(crate) struct StreamTo(Arc<Live>);

impl std::fmt::Debug for StreamTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StreamTo").field(&self.0.dir).finish()
    }
}

/// One streamed run's frames, and the exec of it in flight.
struct Live {
    /// Each exec's copy is `<dir>.<n>` (a relay that found no interpreter
    /// is followed by a cold exec with a copy of its own).
    dir: String,
    sink: Arc<Sink>,
    this_exec: Mutex<ThisExec>,
}

/// The exec in flight: its copy, where its output begins in the run's
/// streams, and what it wrote, up to the daemon's cut (its answer's
/// output).
#[derive(Default)]
struct ThisExec {
    n: u32,
    base: [u64; 2],
    wrote: [Vec<u8>; 2],
}

/// What one follower exec came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// It did not run, or failed: the VM's exec slots are full, or it is
    /// gone.
    Failed,
    /// It read its whole share: more may be left.
    Full,
    /// It read what there was.
    All,
    /// The streams had ended and it read all that was left: the copy is
    /// gone.
    Ended,
}

impl StreamTo {
    pub(crate) fn new(sink: Arc<Sink>) -> StreamTo {
        StreamTo(Arc::new(Live {
            dir: format!("/tmp/.scr/live/{}", crate::guest::new_secret()),
            sink,
            this_exec: Mutex::default(),
        }))
    }

    /// The copy of the exec in flight.
    fn dir(&self) -> String {
        format!("{}.{}", self.0.dir, self.lock().n)
    }

    /// `exec` (the run's exec `p`, behind the copy) with followers beside
    /// it until it answers, then the last ones; its answer carries the
    /// output they read.
    pub(crate) async fn run<E, F>(&self, p: ExecParams, exec: E) -> Result<ExecOutput, SandboxError>
    where
        E: Fn(ExecParams) -> F,
        F: Future<Output = Result<ExecOutput, SandboxError>>,
    {
        {
            let sink = &self.0.sink;
            let mut this = self.lock();
            *this = ThisExec {
                n: this.n + 1,
                base: [sink.seen(Stream::Stdout), sink.seen(Stream::Stderr)],
                wrote: Default::default(),
            };
        }
        let run = exec(self.wrap(p));
        tokio::pin!(run);
        let (answered, mut last) = loop {
            let read = self.read(&exec, POLLS, false);
            tokio::pin!(read);
            tokio::select! {
                out = &mut run => {
                    // The follower in the VM sees the streams end and
                    // answers: it is awaited, not left holding an exec
                    // slot (unless the copy was never made, and it waits
                    // out its polls there).
                    let last = tokio::time::timeout(IN_FLIGHT_GRACE, read).await;
                    break (out, last.unwrap_or(Read::Full));
                }
                r = &mut read => match r {
                    // The VM's exec slots are full, or it is gone: the
                    // last reads still take what the copy holds.
                    Read::Failed => break (run.await, Read::Full),
                    // The streams ended (the exec is about to answer) and
                    // all of them was read: nothing is left to follow.
                    Read::Ended => break (run.await, Read::Ended),
                    Read::Full | Read::All => {}
                },
            }
        };
        // Unless the follower in flight saw the streams end and took all,
        // the last ones take the rest (each at most READ_BYTES).
        if last != Read::Ended {
            last = Read::Full;
        }
        while last == Read::Full {
            last = self.read(&exec, 0, true).await;
        }
        let mut out = answered?;
        // The copy took the output unless tee.sh could not make it (then
        // the exec's own streams have it, as without streaming).
        if last != Read::Failed && out.stdout.is_empty() && out.stderr.is_empty() {
            let [stdout, stderr] = std::mem::take(&mut self.lock().wrote);
            out.stdout = String::from_utf8_lossy(&stdout).into_owned();
            out.stderr = String::from_utf8_lossy(&stderr).into_owned();
        }
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ThisExec> {
        self.0.this_exec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `p`'s command behind the copy (`tee.sh`): same pid, its output to
    /// the copy.
    fn wrap(&self, mut p: ExecParams) -> ExecParams {
        let mut argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            TEE_SH.to_string(),
            "sh".to_string(),
            self.dir(),
            STREAMED_BYTES.to_string(),
        ];
        argv.append(&mut p.argv);
        p.argv = argv;
        p
    }

    /// One follower exec (`last`: it removes the copy once it has read
    /// all of it).
    async fn read<E, F>(&self, exec: &E, polls: u32, last: bool) -> Read
    where
        E: Fn(ExecParams) -> F,
        F: Future<Output = Result<ExecOutput, SandboxError>>,
    {
        let sink = &self.0.sink;
        let seen = [sink.seen(Stream::Stdout), sink.seen(Stream::Stderr)];
        let base = self.lock().base;
        let mut argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            FOLLOW_SH.to_string(),
            "sh".to_string(),
            self.dir(),
            (seen[0] - base[0]).to_string(),
            (seen[1] - base[1]).to_string(),
            polls.to_string(),
            READ_BYTES.to_string(),
        ];
        if last {
            argv.push("end".to_string());
        }
        let p = ExecParams {
            argv,
            timeout_ms: FOLLOW_TIMEOUT_MS,
            ..ExecParams::default()
        };
        let out = match exec(p).await {
            Ok(out) if out.exit_code == Some(0) => out,
            _ => return Read::Failed,
        };
        let mut read = 0;
        let mut ended = false;
        for line in out.stdout.lines() {
            if line == "end" {
                ended = true;
                continue;
            }
            let (stream, b64) = match line.split_once(' ') {
                Some(("1", b)) => (Stream::Stdout, b),
                Some(("2", b)) => (Stream::Stderr, b),
                _ => continue,
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                continue;
            };
            read += bytes.len();
            let i = stream.index();
            if seen[i] - base[i] + bytes.len() as u64 >= STREAMED_BYTES {
                sink.mark_cut();
            }
            {
                let mut this = self.lock();
                let kept = &mut this.wrote[i];
                let room = DAEMON.stream_cap_bytes.value.saturating_sub(kept.len());
                kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            sink.push(stream, &bytes);
        }
        if ended {
            Read::Ended
        } else if read >= READ_BYTES {
            Read::Full
        } else {
            Read::All
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{BusError, FrameWriter};
    use std::future::Future;
    use std::pin::Pin;

    /// A writer that takes every frame, and says when the end frame came.
    struct Taken(Arc<Mutex<Vec<serde_json::Value>>>, Arc<tokio::sync::Notify>);

    impl FrameWriter for Taken {
        fn send(
            &self,
            text: String,
        ) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
            let frame: serde_json::Value = serde_json::from_str(&text).unwrap();
            let end = frame["type"] == "end";
            self.0.lock().unwrap().push(frame);
            if end {
                self.1.notify_one();
            }
            Box::pin(async { Ok(()) })
        }
        fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(async {})
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn answer(stdout: &str, stderr: &str) -> Result<ExecOutput, SandboxError> {
        Ok(ExecOutput {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code: Some(0),
            duration_ms: 1,
        })
    }

    /// A VM whose run exec writes `out`/`err` to the copy (or, `own`, to
    /// its own streams), read by followers in one go.
    fn vm(
        out: &'static str,
        err: &'static str,
        own: bool,
    ) -> impl Fn(ExecParams) -> Pin<Box<dyn Future<Output = Result<ExecOutput, SandboxError>> + Send>>
    {
        move |p: ExecParams| {
            Box::pin(async move {
                if p.argv[2] == TEE_SH {
                    return if own {
                        answer(out, err)
                    } else {
                        answer("", "")
                    };
                }
                let seen: (usize, usize) = (p.argv[5].parse().unwrap(), p.argv[6].parse().unwrap());
                let mut lines = String::new();
                if !own && seen.0 < out.len() {
                    lines.push_str(&format!("1 {}\n", b64(&out[seen.0..])));
                }
                if !own && seen.1 < err.len() {
                    lines.push_str(&format!("2 {}\n", b64(&err[seen.1..])));
                }
                answer(&lines, "")
            })
        }
    }

    async fn streamed(
        exec: impl Fn(
            ExecParams,
        ) -> Pin<Box<dyn Future<Output = Result<ExecOutput, SandboxError>> + Send>>,
    ) -> (ExecOutput, Vec<serde_json::Value>) {
        let frames = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(tokio::sync::Notify::new());
        let sink = Arc::new(Sink::start(
            Box::new(Taken(frames.clone(), ended.clone())),
            std::time::Duration::from_secs(5),
        ));
        let to = StreamTo::new(sink.clone());
        let p = ExecParams {
            argv: vec!["python3".into()],
            ..ExecParams::default()
        };
        let out = to.run(p, exec).await.unwrap();
        sink.end(serde_json::json!({}));
        drop(to);
        drop(sink);
        let came = tokio::time::timeout(std::time::Duration::from_secs(5), ended.notified()).await;
        assert!(came.is_ok(), "the end frame came, after every data frame");
        let taken = frames.lock().unwrap().clone();
        (out, taken)
    }

    /// The answer is what the code wrote, from the copy the followers
    /// read (the result frame still in it, for `run_result` to take), and
    /// the caller got the same bytes as frames, the worker's line left out.
    #[tokio::test]
    async fn the_answer_and_the_frames_are_what_the_code_wrote() {
        let out = "hi\n\n\u{1e}SCR1 s result 1\n";
        let (answered, frames) = streamed(vm(out, "warn\n", false)).await;
        assert_eq!(
            (answered.stdout.as_str(), answered.stderr.as_str()),
            (out, "warn\n")
        );
        let text = |kind: &str| -> String {
            frames
                .iter()
                .filter(|f| f["type"] == kind)
                .map(|f| f["data"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            (text("stdout"), text("stderr")),
            ("hi\n".to_string(), "warn\n".to_string())
        );
    }

    /// Where the copy could not be made, the exec's own streams carry the
    /// output, and the answer keeps them.
    #[tokio::test]
    async fn without_a_copy_the_answer_keeps_the_execs_own_output() {
        let (answered, _) = streamed(vm("own\n", "e\n", true)).await;
        assert_eq!(
            (answered.stdout.as_str(), answered.stderr.as_str()),
            ("own\n", "e\n")
        );
    }
}
