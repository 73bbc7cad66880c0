//! The VM's side of a streamed run: the copy its exec makes of the code's
//! output (`guest/stream/tee.sh`, put in front by `VmLease::exec` when an
//! exec carries a [`StreamTo`]) and the follower execs that read it while
//! the run goes on (`guest/stream/follow.sh`).
//!
//! A follower exec waits in the VM until the copy grows (polling every
//! 20 ms, up to a second), so output reaches the worker a poll and an exec
//! after it was written, and an idle run costs one exec a second. When the
//! run's exec has answered, one last follower takes what is left and
//! removes the copy, before the VM is stopped or serves again.

use std::future::Future;

use base64::Engine as _;

use super::frames::Stream;
use super::{Sink, STREAMED_BYTES};
use crate::runtime::lease::VmLease;
use crate::sandbox::ExecParams;

const TEE_SH: &str = include_str!("../../guest/stream/tee.sh");
const FOLLOW_SH: &str = include_str!("../../guest/stream/follow.sh");

/// Polls of 20 ms one follower exec waits for output before it answers.
const POLLS: u32 = 50;
/// What one follower exec reads of each stream, at most: a quarter of
/// the exec output the worker can get back, so both streams' reads, in
/// base64, fit in one answer.
const READ_BYTES: u64 = (crate::daemon_limits::DAEMON.stream_cap_bytes.value / 4) as u64;
/// A follower exec's budget: its polls and its reads, with room.
const FOLLOW_TIMEOUT_MS: u64 = 5_000;

/// Where an exec copies its output for the follower: put on a run's exec
/// (`ExecParams::stream`) and carried by every exec the run becomes (a
/// relay, a cold start, a session's turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamTo {
    dir: String,
}

impl StreamTo {
    /// `p`'s command behind the copy (`tee.sh`): same pid, same streams.
    pub(crate) fn wrap(&self, mut p: ExecParams) -> ExecParams {
        let mut argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            TEE_SH.to_string(),
            "sh".to_string(),
            self.dir.clone(),
            STREAMED_BYTES.to_string(),
        ];
        argv.append(&mut p.argv);
        p.argv = argv;
        p
    }
}

/// One streamed run's follower.
pub(crate) struct Follow<'a> {
    sink: &'a Sink,
    to: StreamTo,
}

impl<'a> Follow<'a> {
    pub(crate) fn new(sink: &'a Sink) -> Follow<'a> {
        let dir = format!("/tmp/.scr/live/{}", crate::guest::new_secret());
        Follow {
            sink,
            to: StreamTo { dir },
        }
    }

    /// What the run's exec carries.
    pub(crate) fn target(&self) -> StreamTo {
        self.to.clone()
    }

    /// `run` (the run's exec in `vm`), with followers beside it until it
    /// answers, then the last one.
    pub(crate) async fn alongside<T>(&self, vm: &VmLease, run: impl Future<Output = T>) -> T {
        let out = {
            let following = async {
                // A follower that fails (the VM's exec slots are full, the
                // VM is gone) ends the following: the last read still
                // takes what the copy holds.
                while self.read(vm, POLLS, false).await != Read::Failed {}
                std::future::pending::<()>().await
            };
            tokio::pin!(run);
            tokio::select! {
                out = &mut run => out,
                _ = following => unreachable!("following never ends on its own"),
            }
        };
        // Each read takes at most READ_BYTES of a stream: more than that
        // may be left.
        while self.read(vm, 0, true).await == Read::Full {}
        out
    }

    /// One follower exec (`last`: it removes the copy once it has read
    /// all of it).
    async fn read(&self, vm: &VmLease, polls: u32, last: bool) -> Read {
        let seen = [
            self.sink.seen(Stream::Stdout),
            self.sink.seen(Stream::Stderr),
        ];
        let mut args = vec![
            "sh".to_string(),
            "-c".to_string(),
            FOLLOW_SH.to_string(),
            "sh".to_string(),
            self.to.dir.clone(),
            seen[0].to_string(),
            seen[1].to_string(),
            polls.to_string(),
            READ_BYTES.to_string(),
        ];
        if last {
            args.push("end".to_string());
        }
        let p = ExecParams {
            argv: args,
            stdin: None,
            env: Default::default(),
            timeout_ms: FOLLOW_TIMEOUT_MS,
            workdir: None,
            stream: None,
        };
        let Ok(out) = vm.exec(p).await else {
            return Read::Failed;
        };
        if out.exit_code != Some(0) {
            return Read::Failed;
        }
        let mut read = Read::All;
        for line in out.stdout.lines() {
            let (stream, b64) = match line.split_once(' ') {
                Some(("1", b)) => (Stream::Stdout, b),
                Some(("2", b)) => (Stream::Stderr, b),
                _ => continue,
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                continue;
            };
            if bytes.len() as u64 >= READ_BYTES {
                read = Read::Full;
            }
            if seen[stream.index()] + bytes.len() as u64 >= STREAMED_BYTES {
                self.sink.mark_cut();
            }
            self.sink.push(stream, &bytes);
        }
        read
    }
}

/// What a follower exec came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// It did not run, or failed: the VM's exec slots are full, or it is
    /// gone.
    Failed,
    /// It read a stream's whole share: more may be left.
    Full,
    /// It read what there was.
    All,
}
