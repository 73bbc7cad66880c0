//! One sandbox's running "VM": its init (`scr-guest-init`, PID 1 of the
//! sandbox's namespaces, started once at `sandbox::create`) and the wire to
//! it: execs started as its children, their process groups signalled,
//! fresh overlays when the image layer changed underneath, and the whole
//! sandbox killed at stop.
//!
//! An exec is what it is on the daemon: a process started in a guest that
//! is already up. It gets its own process group; when it exits nothing else
//! is killed (background and `setsid` processes live on in the sandbox until
//! it stops); its answer waits for its stdout and stderr to close, so a
//! background child still holding them keeps it open; at the deadline its
//! group gets SIGKILL.
//!
//! The image layer (`image_layer`) is shared by every sandbox of the image,
//! and overlayfs does not expect its upper layer to change underneath a
//! mount. So every write another sandbox's exec or an fs op may have made
//! bumps the layer's generation, and an exec that finds its sandbox's view
//! older gets fresh overlays first (built by the double, attached by the
//! init on top of the old ones, which stay in use by whatever still has
//! files open there): an exec sees what was written into the image before
//! it started, as before.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::super::image_layer::{ExecWorkdirs, ImageLayer};
use super::{pidfd_send_signal, read_capped, ExecSpec, ExitKind, Outcome, ProcHandle, Running};

/// The init binary built by `conformance/build.rs`.
pub(super) const GUEST_INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/scr-guest-init"));

/// Where the init binary is put in a sandbox's root to be exec'd (it
/// unlinks it at once).
pub(super) const GUEST_INIT_PATH: &str = "/.scr-guest-init";

const OP_EXEC: u32 = 1;
const OP_KILL: u32 = 2;
const OP_REMOUNT: u32 = 3;
const EV_EXITED: u32 = 2;
const EV_GONE: u32 = 3;
const EV_REMOUNTED: u32 = 4;

/// The exit "status" of an exec whose sandbox died under it.
const VM_DIED: i64 = i64::MIN;

/// What one exec's waiters are told.
struct Waiters {
    exit: Option<std::sync::mpsc::Sender<i64>>,
    gone: watch::Sender<bool>,
}

/// What the sandbox's handles share: the wire (requests), the execs waiting
/// on events, and the image view's generation.
pub(crate) struct VmCore {
    wire: Mutex<UnixStream>,
    pending: Mutex<HashMap<u64, Waiters>>,
    closed: AtomicBool,
    next_id: AtomicU64,
    layer: Arc<ImageLayer>,
    /// The image layer generation this sandbox's overlays are current with.
    seen: Mutex<u64>,
    /// Every overlay workdir of the sandbox, removed once it is gone.
    workdirs: Mutex<Vec<ExecWorkdirs>>,
}

impl VmCore {
    /// Sends one request: the header (with `fds`), then the body.
    fn send(&self, op: u32, fds: &[RawFd], body: &[u8]) -> std::io::Result<()> {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&op.to_le_bytes());
        head[4..8].copy_from_slice(&(fds.len() as u32).to_le_bytes());
        head[8..].copy_from_slice(&(body.len() as u64).to_le_bytes());
        let wire = self.wire.lock().unwrap_or_else(|p| p.into_inner());
        send_with_fds(&wire, &head, fds)?;
        (&*wire).write_all(body)
    }

    /// Forgets exec `id`'s waiters.
    pub(super) fn forget(&self, id: u64) {
        self.lock_pending().remove(&id);
    }

    /// Asks the init to send `sig` to exec `id`'s process group.
    pub(super) fn kill_group(&self, id: u64, sig: libc::c_int) {
        let mut body = [0u8; 12];
        body[..8].copy_from_slice(&id.to_le_bytes());
        body[8..].copy_from_slice(&sig.to_le_bytes());
        let _ = self.send(OP_KILL, &[], &body);
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiters>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the init's events until the wire closes, then tells every
    /// waiting exec that the sandbox is gone.
    fn read_events(&self, mut wire: UnixStream) {
        let mut rec = [0u8; 24];
        while wire.read_exact(&mut rec).is_ok() {
            let ev = u32::from_le_bytes(rec[..4].try_into().unwrap_or_default());
            let id = u64::from_le_bytes(rec[8..16].try_into().unwrap_or_default());
            let val = i64::from_le_bytes(rec[16..].try_into().unwrap_or_default());
            let mut pending = self.lock_pending();
            match ev {
                EV_EXITED => {
                    if let Some(tx) = pending.get_mut(&id).and_then(|w| w.exit.take()) {
                        let _ = tx.send(val);
                    }
                }
                EV_GONE => {
                    if let Some(w) = pending.get(&id) {
                        let _ = w.gone.send(true);
                    }
                }
                EV_REMOUNTED if val < 0 => {
                    tracing::warn!(
                        errno = -val,
                        "the sandbox could not mount fresh image overlays"
                    );
                }
                _ => {}
            }
        }
        self.closed.store(true, Ordering::SeqCst);
        for (_, mut w) in self.lock_pending().drain() {
            if let Some(tx) = w.exit.take() {
                let _ = tx.send(VM_DIED);
            }
            let _ = w.gone.send(true);
        }
    }

    /// Mounts fresh overlays in the sandbox if the image layer changed since
    /// its view was last current: the double builds each one (a detached
    /// mount, which needs root on the host), the init attaches them. Without
    /// root the view stays as it is (and this says so once).
    fn refresh_view(&self) -> std::io::Result<()> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if !self.layer.catch_up(&mut seen) || !remount_available() {
            return Ok(());
        }
        let work = self.layer.workdirs()?;
        let mut mounts = Vec::new();
        let mut targets = Vec::new();
        let built = self.layer.dirs().iter().try_for_each(|d| {
            let Some(lower) = &d.lower else {
                return Ok(());
            };
            mounts.push(detached_overlay(lower, &d.upper, &work.for_dir(&d.name))?);
            targets.extend_from_slice(format!("/{}\0", d.name).as_bytes());
            Ok::<(), std::io::Error>(())
        });
        self.workdirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(work);
        if let Err(e) = built {
            tracing::warn!(error = %e, "cannot build fresh image overlays; the sandbox keeps its view");
            return Ok(());
        }
        let raw: Vec<RawFd> = mounts.iter().map(|f| f.as_raw_fd()).collect();
        self.send(OP_REMOUNT, &raw, &targets)
    }
}

/// Whether the double may build overlays for its sandboxes (root on the
/// host); logs once when it may not.
fn remount_available() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            tracing::warn!(
                "the sandbox double is not root: a sandbox may not see what other sandboxes \
                 of its image wrote under /usr or /etc after it had looked there"
            );
        }
        root
    })
}

/// An overlay of `lower` + `upper` (`userxattr`, as the sandboxes' own;
/// `volatile`: the layer is scratch, so unmounting need not sync it), built
/// with the mount API and not attached anywhere: the sandbox's init moves
/// it into place.
fn detached_overlay(lower: &Path, upper: &Path, work: &Path) -> std::io::Result<OwnedFd> {
    const FSCONFIG_SET_FLAG: libc::c_uint = 0;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const MOUNT_ATTR_NOSUID: libc::c_uint = 2;
    let cstr = |s: &str| CString::new(s).map_err(std::io::Error::other);
    let path = |p: &Path| cstr(&p.to_string_lossy());
    let fd = |r: libc::c_long| -> std::io::Result<OwnedFd> {
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor.
        Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
    };
    let name = cstr("overlay")?;
    // SAFETY: fsopen with a NUL-terminated name and a flag.
    let fs = fd(unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), 1) })?;
    let set = |cmd: libc::c_uint, key: Option<&CString>, value: Option<&CString>| {
        let ptr = |c: Option<&CString>| c.map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: fsconfig on our fs context with NUL-terminated strings.
        let r = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                cmd,
                ptr(key),
                ptr(value),
                0,
            )
        };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    for (k, v) in [("lowerdir", lower), ("upperdir", upper), ("workdir", work)] {
        set(FSCONFIG_SET_STRING, Some(&cstr(k)?), Some(&path(v)?))?;
    }
    for flag in ["userxattr", "volatile"] {
        set(FSCONFIG_SET_FLAG, Some(&cstr(flag)?), None)?;
    }
    set(FSCONFIG_CMD_CREATE, None, None)?;
    // SAFETY: fsmount of our configured context; the result is a new fd.
    fd(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID,
        )
    })
}

/// `sendmsg` of `head` with `fds` attached as SCM_RIGHTS.
fn send_with_fds(wire: &UnixStream, head: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let space = if fds.is_empty() {
        0
    } else {
        // SAFETY: CMSG_SPACE only computes a size.
        unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) as usize }
    };
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: head.as_ptr() as *mut libc::c_void,
        iov_len: head.len(),
    };
    // SAFETY: a zeroed msghdr, then filled with pointers that outlive the
    // call; the cmsg macros stay within `control`, sized by CMSG_SPACE.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                fds.len(),
            );
        }
        loop {
            let n = libc::sendmsg(wire.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            if n == head.len() as isize {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if n < 0 && err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n < 0 {
                return Err(err);
            }
            // A short write of 16 bytes on a local stream does not happen;
            // the rest goes without the fds, which were sent with byte one.
            return (&*wire).write_all(&head[n as usize..]);
        }
    }
}

/// A sandbox's init, as the double holds it.
pub(crate) struct GuestVm {
    core: Arc<VmCore>,
    /// hakoniwa's reaper (the namespaces' parent) and the init, by pidfd.
    outer: Option<OwnedFd>,
    init: Option<OwnedFd>,
    /// The init's host pid (its pidfd pins it while the sandbox lives).
    init_pid: Option<libc::pid_t>,
    /// The reaper has exited: nothing of the sandbox is left.
    finished: watch::Receiver<bool>,
}

impl std::fmt::Debug for GuestVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestVm")
            .field("finished", &*self.finished.borrow())
            .finish()
    }
}

impl GuestVm {
    /// Takes over a freshly spawned init: `wire` is the double's end of its
    /// fd 0, `child` hakoniwa's reaper, `workdirs` its first overlays'.
    pub(super) fn adopt(
        mut child: hakoniwa::Child,
        wire: UnixStream,
        layer: Arc<ImageLayer>,
        seen: u64,
        workdirs: ExecWorkdirs,
    ) -> std::io::Result<GuestVm> {
        let outer_pid = child.id() as libc::pid_t;
        let outer = super::pidfd_open(outer_pid);
        let init_pid = super::init_pid(outer_pid);
        let init = super::find_init(outer_pid);
        let events = wire.try_clone()?;
        let core = Arc::new(VmCore {
            wire: Mutex::new(wire),
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            layer,
            seen: Mutex::new(seen),
            workdirs: Mutex::new(vec![workdirs]),
        });
        let (done_tx, done_rx) = watch::channel(false);
        let shared = core.clone();
        // One thread per sandbox: its events until the init exits (the wire
        // closes with it), then the reaper's exit.
        std::thread::Builder::new()
            .name("sandbox-vm".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                shared.read_events(events);
                let _ = child.wait();
                // The namespaces are gone: their overlays no longer use these.
                for w in shared
                    .workdirs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .drain(..)
                {
                    w.remove();
                }
                let _ = done_tx.send(true);
            })?;
        Ok(GuestVm {
            core,
            outer,
            init_pid: init_pid.filter(|_| init.is_some()),
            init,
            finished: done_rx,
        })
    }

    /// The host pid of the sandbox's init, while the sandbox lives.
    pub(crate) fn init_pid(&self) -> Option<libc::pid_t> {
        self.init_pid
    }

    /// A sandbox with no process at all, already finished: for the tests of
    /// the table that holds sandboxes.
    #[cfg(test)]
    pub(crate) fn none(layer: Arc<ImageLayer>) -> GuestVm {
        let (wire, _) = UnixStream::pair().expect("socketpair");
        let (_, finished) = watch::channel(true);
        GuestVm {
            core: Arc::new(VmCore {
                wire: Mutex::new(wire),
                pending: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(true),
                next_id: AtomicU64::new(1),
                layer,
                seen: Mutex::new(0),
                workdirs: Mutex::new(Vec::new()),
            }),
            outer: None,
            init: None,
            init_pid: None,
            finished,
        }
    }

    /// Starts `spec` as a child of the sandbox's init. Its output is
    /// collected on helper threads; see [`Running::outcome`].
    pub(crate) fn spawn(&self, spec: &ExecSpec) -> std::io::Result<Running> {
        if self.core.closed.load(Ordering::SeqCst) || self.is_finished() {
            return Err(std::io::Error::other("the sandbox's init is gone"));
        }
        let body = exec_body(spec)?;
        let (in_r, in_w) = std::io::pipe()?;
        let (out_r, out_w) = std::io::pipe()?;
        let (err_r, err_w) = std::io::pipe()?;
        let id = self.core.next_id.fetch_add(1, Ordering::Relaxed);
        let (exit_tx, exit_rx) = std::sync::mpsc::channel();
        let (gone_tx, gone_rx) = watch::channel(false);
        self.core.lock_pending().insert(
            id,
            Waiters {
                exit: Some(exit_tx),
                gone: gone_tx,
            },
        );
        let mut full = id.to_le_bytes().to_vec();
        full.extend_from_slice(&body);
        let sent = self.core.refresh_view().and_then(|()| {
            let fds = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
            self.core.send(OP_EXEC, &fds, &full)
        });
        drop((in_r, out_w, err_w));
        if let Err(e) = sent {
            self.core.forget(id);
            return Err(e);
        }
        let (ended_tx, ended_rx) = watch::channel(false);
        let handle = Arc::new(ProcHandle {
            core: self.core.clone(),
            id,
            ended: ended_rx,
            gone: gone_rx,
            stopped: AtomicBool::new(false),
        });
        let input = spec.stdin.clone();
        let core = self.core.clone();
        let (out_tx, out_rx) = oneshot::channel();
        std::thread::Builder::new()
            .name("sandbox-exec".into())
            .spawn(move || {
                // An empty stdin is EOF at once: no writer thread for it.
                let writer = (!input.is_empty()).then(|| {
                    std::thread::spawn(move || {
                        let mut w = in_w;
                        // EPIPE when the program never reads: that is fine.
                        let _ = w.write_all(&input);
                    })
                });
                let err = std::thread::spawn(move || read_capped(err_r));
                let stdout = read_capped(out_r);
                let stderr = err.join().unwrap_or_default();
                let status = exit_rx.recv().unwrap_or(VM_DIED);
                if let Some(w) = writer {
                    let _ = w.join();
                }
                // This sandbox may have written into the image layer.
                let mut seen = core.seen.lock().unwrap_or_else(|p| p.into_inner());
                core.layer.wrote(&mut seen);
                drop(seen);
                let _ = ended_tx.send(true);
                let _ = out_tx.send(Outcome {
                    stdout,
                    stderr,
                    exit: exit_kind(status),
                });
            })?;
        Ok(Running {
            handle,
            outcome: out_rx,
        })
    }

    /// Kills every process of the sandbox (SIGKILL to its PID 1: the kernel
    /// kills the rest of its PID namespace) and waits up to `patience` until
    /// they are all gone. The reaper itself is killed only as a last resort.
    pub(crate) async fn kill_and_wait(&self, patience: Duration) -> bool {
        self.kill();
        if self.wait_finished(patience).await {
            return true;
        }
        if let Some(fd) = &self.outer {
            pidfd_send_signal(fd, libc::SIGKILL);
        }
        self.wait_finished(patience).await
    }

    /// [`GuestVm::kill_and_wait`] from synchronous code (a `Drop`).
    pub(crate) fn kill_now(&self, patience: Duration) -> bool {
        self.kill();
        crate::standin::wait::until_blocking(patience, Duration::from_millis(5), || {
            self.is_finished()
        })
    }

    fn kill(&self) {
        if self.is_finished() {
            return;
        }
        match self.init.as_ref().or(self.outer.as_ref()) {
            Some(fd) => pidfd_send_signal(fd, libc::SIGKILL),
            None => {
                // No pidfd: closing the wire makes the init exit.
                let wire = self.core.wire.lock().unwrap_or_else(|p| p.into_inner());
                let _ = wire.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Whether every process of the sandbox has been reaped.
    pub(crate) fn is_finished(&self) -> bool {
        *self.finished.borrow()
    }

    async fn wait_finished(&self, patience: Duration) -> bool {
        let mut rx = self.finished.clone();
        let waited = tokio::time::timeout(patience, rx.wait_for(|done| *done)).await;
        matches!(waited, Ok(Ok(_)))
    }
}

impl Drop for GuestVm {
    fn drop(&mut self) {
        // A sandbox never outlives its handle (its init also exits once the
        // wire closes, and dies with the double).
        self.kill();
    }
}

/// The EXEC body after its id: argc, envc, program, workdir, argv, env.
fn exec_body(spec: &ExecSpec) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    body.extend_from_slice(&(spec.argv.len() as u32).to_le_bytes());
    body.extend_from_slice(&(spec.env.len() as u32).to_le_bytes());
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let fields = [&spec.program, &spec.workdir]
        .into_iter()
        .map(|s| (s.as_str(), "program or workdir"))
        .chain(spec.argv.iter().map(|a| (a.as_str(), "argv")))
        .chain(env.iter().map(|e| (e.as_str(), "env")));
    for (s, what) in fields {
        if s.as_bytes().contains(&0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("nul byte found in provided data ({what})"),
            ));
        }
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    Ok(body)
}

/// The exec's end as the daemon reports it: its status, or 128+signal.
fn exit_kind(status: i64) -> ExitKind {
    if status == VM_DIED {
        return ExitKind::ContainerFailure("vm disconnected".into());
    }
    if status < 0 {
        return ExitKind::ContainerFailure(format!(
            "fork: {}",
            std::io::Error::from_raw_os_error(-status as i32)
        ));
    }
    let s = status as libc::c_int;
    if libc::WIFEXITED(s) {
        ExitKind::Code(libc::WEXITSTATUS(s))
    } else if libc::WIFSIGNALED(s) {
        ExitKind::Code(128 + libc::WTERMSIG(s))
    } else {
        ExitKind::ContainerFailure(format!("wait status {s}"))
    }
}
