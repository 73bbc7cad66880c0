//! One exec's process: what to run, how it ended, the handle that signals
//! its process group, and the pidfd helpers under the sandbox's init.

use super::*;

/// One program to run inside a sandbox.
#[derive(Debug, Clone)]
pub(crate) struct ExecSpec {
    /// Absolute guest path of the binary (already looked up in PATH).
    pub(crate) program: String,
    /// argv, argv[0] included.
    pub(crate) argv: Vec<String>,
    /// The complete environment.
    pub(crate) env: Vec<(String, String)>,
    /// Absolute guest working directory.
    pub(crate) workdir: String,
    /// Bytes fed to stdin before EOF.
    pub(crate) stdin: Vec<u8>,
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExitKind {
    /// The guest program's exit status, or 128+signal.
    Code(i32),
    /// The container itself could not be set up or was killed.
    ContainerFailure(String),
}

/// What an exec produced.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) exit: ExitKind,
}

/// A live exec: its process group in the sandbox, signalled through the
/// sandbox's init (which alone knows the group's pids).
pub(crate) struct ProcHandle {
    pub(super) core: Arc<vm::VmCore>,
    pub(super) id: u64,
    /// The exec has ended: its process exited and its output closed.
    pub(super) ended: watch::Receiver<bool>,
    /// Its process group has no process left (after a SIGKILL).
    pub(super) gone: watch::Receiver<bool>,
    /// Set when the sandbox is being stopped: the exec then reports the
    /// daemon's "vm disconnected" S300 rather than a kill status.
    pub(super) stopped: AtomicBool,
}

impl std::fmt::Debug for ProcHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcHandle").field("id", &self.id).finish()
    }
}

impl ProcHandle {
    /// Records that the sandbox owning this exec is stopping.
    pub(crate) fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether the owning sandbox was stopped while this exec ran.
    pub(crate) fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Sends `sig` to the exec's process group (as the daemon does at the
    /// deadline; a process that left the group is not touched).
    pub(crate) fn signal(&self, sig: libc::c_int) {
        self.core.kill_group(self.id, sig);
    }

    /// SIGKILLs the exec's process group and waits (up to `patience`) until
    /// no process of it is left. Processes that left the group (`setsid`)
    /// live on in the sandbox until it stops, as on the daemon.
    pub(crate) async fn kill_and_wait(&self, patience: Duration) -> bool {
        if self.is_finished() {
            return true;
        }
        self.signal(libc::SIGKILL);
        let mut rx = self.gone.clone();
        let waited = tokio::time::timeout(patience, rx.wait_for(|gone| *gone)).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// Whether the exec has ended (or its group was killed to the last
    /// process).
    pub(crate) fn is_finished(&self) -> bool {
        *self.ended.borrow() || *self.gone.borrow()
    }
}

impl Drop for ProcHandle {
    fn drop(&mut self) {
        self.core.forget(self.id);
    }
}

/// A spawned exec: its processes, and its outcome once it has ended.
pub(crate) struct Running {
    pub(crate) handle: Arc<ProcHandle>,
    pub(super) outcome: oneshot::Receiver<Outcome>,
}

impl Running {
    /// Waits for the exec to end (after its output pipes reached EOF).
    pub(crate) async fn outcome(self) -> Outcome {
        self.outcome.await.unwrap_or_else(|_| Outcome {
            stdout: Vec::new(),
            stderr: Vec::new(),
            exit: ExitKind::ContainerFailure("exec collector vanished".to_string()),
        })
    }
}

/// Reads a stream to EOF, keeping the first [`OUTPUT_CAP`] bytes and
/// draining the rest so the writer never blocks on a full pipe.
pub(super) fn read_capped(mut r: impl Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    kept
}

/// PID 1 of the sandbox's namespaces, as a pidfd. hakoniwa's reaper forks it
/// before `spawn` returns, so it is listed among the reaper's children.
pub(super) fn find_init(outer: libc::pid_t) -> Option<OwnedFd> {
    let pid = init_pid(outer)?;
    let fd = pidfd_open(pid)?;
    // The pidfd pins the process; confirm it is still the reaper's child
    // (and not a recycled pid) before trusting it.
    (parent_of(pid) == Some(outer)).then_some(fd)
}

/// The host pid of the sandbox's PID 1: hakoniwa's reaper's child.
pub(super) fn init_pid(outer: libc::pid_t) -> Option<libc::pid_t> {
    let listed = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse::<libc::pid_t>().ok());
    // Kernels without CONFIG_PROC_CHILDREN: scan for the reaper's child.
    let pid = listed.or_else(|| {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .find(|p| parent_of(*p) == Some(outer))
    })?;
    Some(pid)
}

/// Parent pid from `/proc/<pid>/stat` (after the `(comm)` field, which may
/// itself contain spaces and parentheses).
pub(super) fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

pub(super) fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just handed us this fd; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

pub(super) fn pidfd_send_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}
