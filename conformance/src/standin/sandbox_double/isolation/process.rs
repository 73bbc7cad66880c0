//! One exec's process: what to run, how it ended, the handle that signals
//! and reaps it, and the init and pidfd helpers under it.

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
    /// Share the host's network namespace (`network:true`). Otherwise the
    /// exec gets a private one with only loopback, as a VM without a NIC.
    pub(crate) network: bool,
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

/// A live exec's processes, addressed by pidfd so a recycled pid can never
/// be signalled by mistake.
#[derive(Debug)]
pub(crate) struct ProcHandle {
    /// hakoniwa's reaper, the namespace's parent.
    pub(super) outer: Option<OwnedFd>,
    /// PID 1 of the exec's namespace.
    pub(super) init: Option<OwnedFd>,
    pub(super) finished: watch::Receiver<bool>,
    /// Set when the sandbox is being stopped: the exec then reports the
    /// daemon's "vm disconnected" S300 rather than a kill status.
    pub(super) stopped: AtomicBool,
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

    /// Sends `sig` to the exec's PID 1 (or its reaper if PID 1 is unknown).
    pub(crate) fn signal(&self, sig: libc::c_int) {
        if let Some(fd) = self.init.as_ref().or(self.outer.as_ref()) {
            pidfd_send_signal(fd, sig);
        }
    }

    /// Kills every process of the exec and waits (up to `patience`) until
    /// they are all gone. SIGKILL to PID 1 makes the kernel kill the whole
    /// namespace; the reaper only exits once that is done, which is what
    /// `finished` reports. The reaper itself is killed only as a last resort.
    pub(crate) async fn kill_and_wait(&self, patience: Duration) -> bool {
        if self.is_finished() {
            return true;
        }
        match &self.init {
            Some(fd) => pidfd_send_signal(fd, libc::SIGKILL),
            None => {
                if let Some(fd) = &self.outer {
                    pidfd_send_signal(fd, libc::SIGKILL);
                }
            }
        }
        if self.wait_finished(patience).await {
            return true;
        }
        if let Some(fd) = &self.outer {
            pidfd_send_signal(fd, libc::SIGKILL);
        }
        self.wait_finished(patience).await
    }

    /// Whether every process of the exec has been reaped.
    pub(crate) fn is_finished(&self) -> bool {
        *self.finished.borrow()
    }

    /// Waits up to `patience` for the exec to be fully reaped.
    pub(crate) async fn wait_finished(&self, patience: Duration) -> bool {
        let mut rx = self.finished.clone();
        let waited = tokio::time::timeout(patience, rx.wait_for(|done| *done)).await;
        matches!(waited, Ok(Ok(_)))
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

/// The namespace's PID 1: forks the program, reaps every orphan, and exits
/// with the program's status (128+signal if a signal killed it).
pub(super) fn run_init(program: &CString, argv: &[CString], envp: &[CString], argv0: &str) -> i32 {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    // SAFETY: plain libc calls on valid, NUL-terminated buffers that outlive
    // them; the child branch never returns (execve or _exit).
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return INIT_FAILURE;
        }
        if pid == 0 {
            libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0);
            libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            let (code, what) = if errno == libc::EACCES {
                (126, "permission denied")
            } else {
                (127, "not found")
            };
            let msg = format!("exec: {argv0}: {what}\n");
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(code);
        }
        loop {
            let mut status: libc::c_int = 0;
            let r = libc::waitpid(-1, &mut status, 0);
            if r == pid {
                if libc::WIFEXITED(status) {
                    return libc::WEXITSTATUS(status);
                }
                if libc::WIFSIGNALED(status) {
                    return 128 + libc::WTERMSIG(status);
                }
            } else if r < 0 && *libc::__errno_location() != libc::EINTR {
                return INIT_FAILURE;
            }
        }
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

/// PID 1 of the exec's namespace, as a pidfd. hakoniwa's reaper forks it
/// before `spawn` returns, so it is listed among the reaper's children.
pub(super) fn find_init(outer: libc::pid_t) -> Option<OwnedFd> {
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
    let fd = pidfd_open(pid)?;
    // The pidfd pins the process; confirm it is still the reaper's child
    // (and not a recycled pid) before trusting it.
    (parent_of(pid) == Some(outer)).then_some(fd)
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
