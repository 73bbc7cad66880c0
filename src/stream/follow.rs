//! The VM's side of a streamed run: its exec's stdout and stderr pass
//! through one `tee` each (`guest/stream/tee.sh`, put in front by
//! `VmLease::exec` when an exec carries a [`StreamTo`]), which also copies
//! them into the VM, and follower execs read the copies while the run goes
//! on (`guest/stream/follow.sh`). The exec's answer is what it would be
//! unstreamed; what the followers had not read yet is taken from it, so a
//! run that ends before a follower looks costs no follower at all, and the
//! copies are read again only past what the answer holds: past the
//! daemon's cut by one `tail`, past bytes it could not decode by a
//! follower.
//!
//! The first follower looks once the run has gone on for [`FIRST_LOOK`];
//! each waits in the VM until the copy grows or the streams end (polling
//! every 20 ms, up to a second), so output reaches the worker a poll and
//! an exec after it was written, an idle run costs one exec a second, and
//! no follower outlives its run in the VM by more than a poll.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;

use super::frames::Stream;
use super::{Sink, STREAMED_BYTES};
use crate::daemon_limits::DAEMON;
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

const TEE_SH: &str = include_str!("../../guest/stream/tee.sh");
const FOLLOW_SH: &str = include_str!("../../guest/stream/follow.sh");

/// Where a VM's streamed exec keeps its copies (root's; one streamed exec
/// at a time uses it, each under a name of its own, `tee.sh`'s `<gen>`).
const LIVE_DIR: &str = "/tmp/.scr/live";
/// How long a run goes on before the first follower looks: what it wrote
/// sooner comes with its answer if it ends by then (most runs do), and a
/// follower exec would only have competed with it.
const FIRST_LOOK: Duration = Duration::from_millis(25);
/// Polls of 20 ms one follower exec waits for output before it answers.
const POLLS: u32 = 50;
/// What one follower exec reads of both streams together, at most: two
/// thirds of the exec output the worker can get back, so the read, in
/// base64, fits in one answer.
const READ_BYTES: usize = DAEMON.stream_cap_bytes.value * 2 / 3;
/// Bytes of the answer that a read of the copy past the answer's cut
/// begins with again, to tell the copy is this exec's (ours, not a limit
/// of the sandbox's).
const OVERLAP: usize = 64;
/// A follower exec's budget: its polls and its reads, with room.
const FOLLOW_TIMEOUT_MS: u64 = 5_000;

/// Where a streamed run's execs copy their output: put on the run's exec
/// (`ExecParams::stream`) and carried by every exec it becomes (a relay, a
/// cold start, a session's turn).
#[derive(Clone)]
pub(crate) struct StreamTo(Arc<Live>);

impl std::fmt::Debug for StreamTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StreamTo").finish()
    }
}

/// One streamed run's frames, and the exec of it in flight.
struct Live {
    /// Each exec's copies are named `<name>.<n>` (a relay that found no
    /// interpreter is followed by a cold exec with copies of its own).
    name: String,
    sink: Arc<Sink>,
    this_exec: Mutex<ThisExec>,
}

/// The exec in flight: where its output begins in the run's streams, and
/// what the followers read of it, up to the daemon's cut (to line it up
/// with the exec's answer).
#[derive(Default)]
struct ThisExec {
    n: u32,
    base: [u64; 2],
    read: [Vec<u8>; 2],
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
    /// The streams had ended and it read all that was left.
    Ended,
}

impl StreamTo {
    pub(crate) fn new(sink: Arc<Sink>) -> StreamTo {
        StreamTo(Arc::new(Live {
            name: crate::guest::new_secret(),
            sink,
            this_exec: Mutex::default(),
        }))
    }

    /// The name of the exec in flight's copies.
    fn gen(&self) -> String {
        format!("{}.{}", self.0.name, self.lock().n)
    }

    /// `exec` (the run's exec `p`, behind the copy) with followers beside
    /// it once it has gone on for [`FIRST_LOOK`]; then the rest of its
    /// output from its answer.
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
                read: Default::default(),
            };
        }
        let run = exec(self.wrap(p));
        tokio::pin!(run);
        let answered = tokio::select! {
            out = &mut run => Some(out),
            _ = tokio::time::sleep(FIRST_LOOK) => None,
        };
        let answered = match answered {
            Some(out) => out,
            None => loop {
                let read = self.read(&exec, POLLS);
                tokio::pin!(read);
                tokio::select! {
                    // The follower in flight is left: it sees the streams
                    // end within a poll and leaves its exec slot, and the
                    // answer holds what it would have read.
                    out = &mut run => break out,
                    r = &mut read => match r {
                        // The VM's exec slots are full, or it is gone; or
                        // the streams ended: the answer brings the rest.
                        Read::Failed | Read::Ended => break run.await,
                        Read::Full | Read::All => {}
                    },
                }
            },
        };
        let out = answered?;
        // What comes now the answer brings anyway: its frames wait while
        // the rest is read, instead of competing with that read.
        self.0.sink.hold(true);
        self.rest(Stream::Stdout, &out.stdout, &exec).await;
        self.rest(Stream::Stderr, &out.stderr, &exec).await;
        self.0.sink.hold(false);
        Ok(out)
    }

    /// Streams what of `stream` the followers had not read: from the
    /// exec's answer (`text`) as far as it is the code's bytes, then from
    /// the copy.
    async fn rest<E, F>(&self, stream: Stream, text: &str, exec: &E)
    where
        E: Fn(ExecParams) -> F,
        F: Future<Output = Result<ExecOutput, SandboxError>>,
    {
        let sink = &self.0.sink;
        let i = stream.index();
        let had = self.streamed(stream);
        let bytes = text.as_bytes();
        // Where the answer goes on from what was read: the answer holds
        // the same bytes up to there unless the daemon replaced some it
        // could not decode.
        let lined_up = had == 0 || {
            let this = self.lock();
            this.read[i].len() == had && bytes.starts_with(&this.read[i])
        };
        let mut lossy: &[u8] = &[];
        if lined_up && had <= bytes.len() {
            let rest = &bytes[had..];
            // The answer is the code's bytes up to the first U+FFFD (an
            // undecodable byte, or one the code wrote) and up to the
            // daemon's cut; past either, the copy has them exactly.
            let exact = find(rest, "\u{FFFD}".as_bytes()).unwrap_or(rest.len());
            sink.push(stream, &rest[..exact]);
            lossy = &rest[exact..];
            let cut = bytes.len() + 4 >= DAEMON.stream_cap_bytes.value;
            if lossy.is_empty() && (!cut || self.tail_past(stream, bytes, exec).await) {
                return;
            }
        }
        let before = sink.seen(stream);
        while self.read(exec, 0).await == Read::Full {}
        // No copy to read (it could not be made, or the VM's exec slots
        // are full): the answer's text is all there is.
        if sink.seen(stream) == before && !lossy.is_empty() {
            sink.push(stream, lossy);
        }
    }

    /// Streams what of `stream` is past the daemon's cut of an `answer`
    /// that was the code's bytes up to it (the common case of a cut):
    /// one `tail` of the copy (one process, no shell; the copy is whole,
    /// as the daemon answers once the tees ended), from [`OVERLAP`] bytes
    /// before the cut, which must be the answer's last bytes again: a
    /// copy that is not this exec's (an earlier one, left where this exec
    /// could not make its own) is not streamed. Whether it could; what is
    /// not plain text, or more than the daemon gives back, is left to
    /// follower execs.
    async fn tail_past<E, F>(&self, stream: Stream, answer: &[u8], exec: &E) -> bool
    where
        E: Fn(ExecParams) -> F,
        F: Future<Output = Result<ExecOutput, SandboxError>>,
    {
        let sink = &self.0.sink;
        let i = stream.index();
        let had = self.streamed(stream);
        let overlap = &answer[answer.len() - answer.len().min(OVERLAP)..];
        let p = ExecParams {
            argv: vec![
                "tail".to_string(),
                "-c".to_string(),
                format!("+{}", had - overlap.len() + 1),
                format!("{LIVE_DIR}/{}", i + 1),
            ],
            timeout_ms: FOLLOW_TIMEOUT_MS,
            ..ExecParams::default()
        };
        let out = match exec(p).await {
            Ok(out) if out.exit_code == Some(0) => out,
            _ => return false,
        };
        let got = out.stdout.as_bytes();
        let Some(past) = got.strip_prefix(overlap) else {
            return false;
        };
        if find(past, "\u{FFFD}".as_bytes()).is_some()
            || got.len() + 4 >= DAEMON.stream_cap_bytes.value
        {
            return false;
        }
        if (had + past.len()) as u64 >= STREAMED_BYTES {
            sink.mark_cut();
        }
        sink.push(stream, past);
        true
    }

    /// Bytes of `stream` the exec in flight has had taken in so far.
    fn streamed(&self, stream: Stream) -> usize {
        (self.0.sink.seen(stream) - self.lock().base[stream.index()]) as usize
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ThisExec> {
        self.0.this_exec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `p`'s command behind the copy (`tee.sh`).
    fn wrap(&self, p: ExecParams) -> ExecParams {
        behind_copy(p, LIVE_DIR, &self.gen(), STREAMED_BYTES)
    }

    /// One follower exec.
    async fn read<E, F>(&self, exec: &E, polls: u32) -> Read
    where
        E: Fn(ExecParams) -> F,
        F: Future<Output = Result<ExecOutput, SandboxError>>,
    {
        let sink = &self.0.sink;
        let seen = [sink.seen(Stream::Stdout), sink.seen(Stream::Stderr)];
        let base = self.lock().base;
        let p = ExecParams {
            argv: vec![
                "sh".to_string(),
                "-c".to_string(),
                FOLLOW_SH.to_string(),
                "sh".to_string(),
                LIVE_DIR.to_string(),
                self.gen(),
                (seen[0] - base[0]).to_string(),
                (seen[1] - base[1]).to_string(),
                polls.to_string(),
                READ_BYTES.to_string(),
            ],
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
                let kept = &mut this.read[i];
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

/// `p`'s command behind the copy of exec `gen`'s output in `dir` (at
/// most `cap` bytes a stream): in its own shell when it is `sh -c
/// <script>` (a relay, a turn), so the copy costs no shell of its own; any
/// other argv is exec'd by a shell that set the copy up.
fn behind_copy(mut p: ExecParams, dir: &str, gen: &str, cap: u64) -> ExecParams {
    let start = format!("{TEE_SH}scr_tee '{dir}' '{gen}' {cap}\n");
    match p.argv.as_mut_slice() {
        [sh, c, script, ..] if sh == "sh" && c == "-c" => {
            *script = format!("{start}{script}");
        }
        _ => {
            let mut argv = vec![
                "sh".to_string(),
                "-c".to_string(),
                format!("{start}exec \"$@\"\n"),
                "sh".to_string(),
            ];
            argv.append(&mut p.argv);
            p.argv = argv;
        }
    }
    p
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

#[cfg(test)]
mod scripts_tests;

#[cfg(test)]
mod tests;
