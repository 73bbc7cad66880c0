//! `scr-guest-init`: PID 1 of one sandbox of the daemon double, the stand-in
//! for the guest's init and its shell dispatcher. The double starts it once
//! per sandbox, inside the sandbox's namespaces with its rootfs mounted, and
//! asks it for every exec; see `sandbox_double/isolation/vm.rs` for the other
//! end of the wire.
//!
//! Built by `conformance/build.rs` with the same `rustc`, std only (so the
//! few libc calls are declared here), and embedded in the library: a small
//! process of its own, not a fork of the double, so a thousand idle
//! sandboxes pin no copy of the double's memory.
//!
//! The wire is fd 0, a Unix stream socket. Requests are a 16-byte header
//! (`op: u32`, `nfds: u32`, `len: u64`, the fds attached to it) and `len`
//! bytes of body; events are 24-byte records (`ev: u32`, 0, `id: u64`,
//! `val: i64`). Ops: EXEC (fds stdin/stdout/stderr; body `id`, `argc`,
//! `envc`, then NUL-terminated program, workdir, argv, env): `posix_spawn`
//! (a vfork: no copy of this process) in its own process group; EXITED(id,
//! wait status) when that process is reaped.
//! KILL (`id`, `sig`): signal the exec's process group; with SIGKILL, GONE(id)
//! once the group has no process left. REMOUNT (one detached overlay mount
//! per target; body NUL-terminated targets): attach them over the old ones.
//! Every orphan is reaped; EOF on fd 0 ends the sandbox (PID 1 exits, the
//! kernel kills the rest).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void, CString};

const OP_EXEC: u32 = 1;
const OP_KILL: u32 = 2;
const OP_REMOUNT: u32 = 3;
const EV_EXITED: u32 = 2;
const EV_GONE: u32 = 3;
const EV_REMOUNTED: u32 = 4;

const SIGKILL: c_int = 9;
const SIGPIPE: c_int = 13;
const SIGCHLD: c_int = 17;
const SIG_BLOCK: c_int = 0;
const POSIX_SPAWN_SETPGROUP: i16 = 0x02;
const POSIX_SPAWN_SETSIGDEF: i16 = 0x04;
const POSIX_SPAWN_SETSIGMASK: i16 = 0x08;
const SFD_CLOEXEC: c_int = 0o2000000;
const MSG_CMSG_CLOEXEC: c_int = 0x40000000;
const SOL_SOCKET: c_int = 1;
const SCM_RIGHTS: c_int = 1;
const POLLIN: i16 = 1;
const WNOHANG: c_int = 1;
const ESRCH: c_int = 3;
const EINTR: c_int = 4;
const ENOENT: c_int = 2;
const ENOEXEC: c_int = 8;
const EACCES: c_int = 13;
const ENOTDIR: c_int = 20;
const SYS_MOVE_MOUNT: c_long = 429;
const SYS_MOUNT_SETATTR: c_long = 442;
const AT_EMPTY_PATH: c_uint = 0x1000;
const MOUNT_ATTR_RDONLY: u64 = 1;
const AT_FDCWD: c_int = -100;
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 4;
const MAX_FDS: usize = 32;

#[repr(C)]
struct IoVec {
    base: *mut c_void,
    len: usize,
}

#[repr(C)]
struct MsgHdr {
    name: *mut c_void,
    namelen: u32,
    iov: *mut IoVec,
    iovlen: usize,
    control: *mut c_void,
    controllen: usize,
    flags: c_int,
}

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

/// glibc's `sigset_t`: 1024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

/// glibc's `posix_spawnattr_t` (336 bytes on 64-bit Linux), with room.
#[repr(C)]
struct SpawnAttr([u64; 64]);

/// glibc's `posix_spawn_file_actions_t` (80 bytes), with room.
#[repr(C)]
struct SpawnActions([u64; 32]);

extern "C" {
    fn posix_spawn(
        pid: *mut c_int,
        path: *const c_char,
        actions: *const SpawnActions,
        attr: *const SpawnAttr,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> c_int;
    fn posix_spawnattr_init(attr: *mut SpawnAttr) -> c_int;
    fn posix_spawnattr_destroy(attr: *mut SpawnAttr) -> c_int;
    fn posix_spawnattr_setflags(attr: *mut SpawnAttr, flags: i16) -> c_int;
    fn posix_spawnattr_setpgroup(attr: *mut SpawnAttr, pgroup: c_int) -> c_int;
    fn posix_spawnattr_setsigmask(attr: *mut SpawnAttr, mask: *const SigSet) -> c_int;
    fn posix_spawnattr_setsigdefault(attr: *mut SpawnAttr, set: *const SigSet) -> c_int;
    fn posix_spawn_file_actions_init(actions: *mut SpawnActions) -> c_int;
    fn posix_spawn_file_actions_destroy(actions: *mut SpawnActions) -> c_int;
    fn posix_spawn_file_actions_adddup2(actions: *mut SpawnActions, fd: c_int, new: c_int)
        -> c_int;
    fn posix_spawn_file_actions_addchdir_np(
        actions: *mut SpawnActions,
        path: *const c_char,
    ) -> c_int;
    fn _exit(code: c_int) -> !;
    fn close(fd: c_int) -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn recvmsg(fd: c_int, msg: *mut MsgHdr, flags: c_int) -> isize;
    fn poll(fds: *mut PollFd, n: c_ulong, timeout: c_int) -> c_int;
    fn signalfd(fd: c_int, mask: *const SigSet, flags: c_int) -> c_int;
    fn sigemptyset(set: *mut SigSet) -> c_int;
    fn sigaddset(set: *mut SigSet, sig: c_int) -> c_int;
    fn sigprocmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn syscall(n: c_long, ...) -> c_long;
    fn unlink(path: *const c_char) -> c_int;
    fn __errno_location() -> *mut c_int;
}

fn errno() -> c_int {
    // SAFETY: glibc's thread-local errno.
    unsafe { *__errno_location() }
}

/// Sends one event record on the wire (fd 0: the socket is duplex).
fn send_event(ev: u32, id: u64, val: i64) {
    let mut rec = [0u8; 24];
    rec[..4].copy_from_slice(&ev.to_le_bytes());
    rec[8..16].copy_from_slice(&id.to_le_bytes());
    rec[16..].copy_from_slice(&val.to_le_bytes());
    let mut done = 0;
    while done < rec.len() {
        // SAFETY: a valid buffer; fd 0 is the wire.
        let n = unsafe { write(0, rec[done..].as_ptr().cast(), rec.len() - done) };
        if n < 0 && errno() == EINTR {
            continue;
        }
        if n <= 0 {
            // The double is gone: so is the sandbox.
            // SAFETY: ends this process.
            unsafe { _exit(0) };
        }
        done += n as usize;
    }
}

/// Reads exactly `buf.len()` bytes from the wire; `false` on EOF or error.
fn read_exact(buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: a valid buffer.
        let n = unsafe { read(0, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        if n < 0 && errno() == EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

/// One request: its op, its fds, its body. `None` on EOF.
fn next_request() -> Option<(u32, Vec<c_int>, Vec<u8>)> {
    let mut head = [0u8; 16];
    let mut control = [0u64; (MAX_FDS * 4 + 16) / 8 + 1];
    let mut iov = IoVec {
        base: head.as_mut_ptr().cast(),
        len: head.len(),
    };
    let mut msg = MsgHdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: control.as_mut_ptr().cast(),
        controllen: std::mem::size_of_val(&control),
        flags: 0,
    };
    let n = loop {
        // SAFETY: every pointer in `msg` is valid for its length.
        let n = unsafe { recvmsg(0, &mut msg, MSG_CMSG_CLOEXEC) };
        if n < 0 && errno() == EINTR {
            continue;
        }
        break n;
    };
    if n <= 0 {
        return None;
    }
    let mut fds = Vec::new();
    if msg.controllen >= 16 {
        // One cmsghdr: len (usize), level, type, then the fds.
        let bytes: &[u8] = unsafe {
            // SAFETY: `control` is plain memory of at least `controllen` bytes.
            std::slice::from_raw_parts(control.as_ptr().cast(), msg.controllen)
        };
        let len = usize::from_le_bytes(bytes[..8].try_into().ok()?);
        let level = i32::from_le_bytes(bytes[8..12].try_into().ok()?);
        let kind = i32::from_le_bytes(bytes[12..16].try_into().ok()?);
        if level == SOL_SOCKET && kind == SCM_RIGHTS && len >= 16 && len <= bytes.len() {
            for c in bytes[16..len].chunks_exact(4) {
                fds.push(i32::from_le_bytes(c.try_into().ok()?));
            }
        }
    }
    if (n as usize) < head.len() && !read_exact(&mut head[n as usize..]) {
        return None;
    }
    let op = u32::from_le_bytes(head[..4].try_into().ok()?);
    let len = u64::from_le_bytes(head[8..].try_into().ok()?) as usize;
    let mut body = vec![0u8; len];
    if !read_exact(&mut body) {
        return None;
    }
    Some((op, fds, body))
}

/// The NUL-terminated strings of `body` (and an empty tail after the last).
fn strings(body: &[u8]) -> Vec<CString> {
    body.split(|b| *b == 0)
        .map(|s| CString::new(s).unwrap_or_default())
        .collect()
}

/// One exec the init knows of: its process group, whether its first
/// process still runs, and whether the double waits for the group to end.
struct Exec {
    pgid: c_int,
    main_alive: bool,
    watched: bool,
}

/// Starts the exec's process. It has its own process group (as the
/// daemon's execs do), the given stdio and working directory, default
/// signal handling, and root's capabilities in the sandbox's own
/// namespaces (a VM's root may remount its mounts, as the worker's image
/// seal does). `Err` carries the status to report: a wait status when
/// the program could not be run, a negative errno otherwise.
fn spawn(fds: &[c_int], body: &[u8]) -> Result<(u64, c_int), (u64, i64)> {
    let id = u64::from_le_bytes(
        body.get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    );
    let argc = u32::from_le_bytes(
        body.get(8..12)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 4]),
    );
    let mut s = strings(body.get(16..).unwrap_or_default());
    s.pop(); // after the last NUL
    if fds.len() != 3 || s.len() < 2 + argc as usize {
        return Err((id, -22));
    }
    let program = s[0].clone();
    let workdir = s[1].clone();
    let argv0 = s
        .get(2)
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut argv: Vec<*const c_char> = s[2..2 + argc as usize].iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const c_char> = s[2 + argc as usize..].iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut attr = SpawnAttr([0; 64]);
    let mut actions = SpawnActions([0; 32]);
    let mut pid: c_int = 0;
    // SAFETY: glibc's posix_spawn (a CLONE_VM|CLONE_VFORK child, so no copy
    // of this process's memory) on attribute and action objects initialised
    // here, with NUL-terminated strings and arrays prepared above.
    let err = unsafe {
        let mut empty = SigSet([0; 16]);
        sigemptyset(&mut empty);
        let mut pipe = SigSet([0; 16]);
        sigemptyset(&mut pipe);
        sigaddset(&mut pipe, SIGPIPE);
        posix_spawnattr_init(&mut attr);
        posix_spawnattr_setflags(
            &mut attr,
            POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF,
        );
        posix_spawnattr_setpgroup(&mut attr, 0);
        posix_spawnattr_setsigmask(&mut attr, &empty);
        posix_spawnattr_setsigdefault(&mut attr, &pipe);
        posix_spawn_file_actions_init(&mut actions);
        for (i, fd) in fds.iter().enumerate() {
            posix_spawn_file_actions_adddup2(&mut actions, *fd, i as c_int);
        }
        posix_spawn_file_actions_addchdir_np(&mut actions, workdir.as_ptr());
        let err = posix_spawn(
            &mut pid,
            program.as_ptr(),
            &actions,
            &attr,
            argv.as_ptr(),
            envp.as_ptr(),
        );
        posix_spawn_file_actions_destroy(&mut actions);
        posix_spawnattr_destroy(&mut attr);
        err
    };
    match err {
        0 => Ok((id, pid)),
        // The program (or its working directory) could not be used: the
        // exec's answer, as a shell would give it.
        ENOENT | ENOTDIR | EACCES | ENOEXEC => {
            let (what, code) = if err == EACCES {
                ("permission denied", 126)
            } else {
                ("not found", 127)
            };
            let msg = format!("exec: {argv0}: {what}\n");
            // SAFETY: a valid buffer; fds[2] is the exec's stderr.
            unsafe { write(fds[2], msg.as_ptr().cast(), msg.len()) };
            Err((id, (code as i64) << 8))
        }
        e => Err((id, -(e as i64))),
    }
}

/// Attaches each fresh overlay (a detached mount the double built) over its
/// target, on top of the old one (which stays in use by whatever still has
/// files open in it).
fn remount(fds: &[c_int], body: &[u8]) -> i64 {
    let mut targets = strings(body);
    targets.pop();
    if fds.len() != targets.len() {
        return -22;
    }
    let empty = CString::default();
    // Read once: the mounts these targets are on now.
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let failed = |what: &str, t: &CString| -> i64 {
        let e = errno();
        eprintln!(
            "scr-guest-init: {what} {}: {}",
            t.to_string_lossy(),
            std::io::Error::from_raw_os_error(e)
        );
        -(e as i64)
    };
    let mut result = 0;
    for (t, fd) in targets.iter().zip(fds) {
        // A mount the guest made read-only stays so under the fresh one.
        if read_only(&table, t) {
            let attr = [MOUNT_ATTR_RDONLY, 0u64, 0, 0];
            // SAFETY: mount_setattr of a detached mount fd, with an empty
            // NUL-terminated path and a mount_attr of its size.
            let r = unsafe {
                syscall(
                    SYS_MOUNT_SETATTR,
                    *fd,
                    empty.as_ptr(),
                    AT_EMPTY_PATH,
                    attr.as_ptr(),
                    std::mem::size_of_val(&attr),
                )
            };
            if r != 0 {
                result = failed("keeping read-only", t);
                continue;
            }
        }
        // SAFETY: move_mount of a mount fd onto a NUL-terminated path.
        let r = unsafe {
            syscall(
                SYS_MOVE_MOUNT,
                *fd,
                empty.as_ptr(),
                AT_FDCWD,
                t.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if r != 0 {
            result = failed("mount", t);
        }
    }
    result
}

/// Whether the topmost mount at `target` in `table` (this sandbox's
/// `/proc/self/mountinfo`) is read-only.
fn read_only(table: &str, target: &CString) -> bool {
    let target = target.to_string_lossy();
    table
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ').skip(4);
            Some((f.next()?, f.next()?))
        })
        .filter(|(at, _)| *at == target)
        .last()
        .is_some_and(|(_, opts)| opts.split(',').any(|o| o == "ro"))
}

/// Reaps every child that has exited; reports the execs' own processes and
/// every watched group that has emptied.
fn reap(execs: &mut HashMap<u64, Exec>, by_pid: &mut HashMap<c_int, u64>) {
    loop {
        let mut status: c_int = 0;
        // SAFETY: a valid out pointer.
        let pid = unsafe { waitpid(-1, &mut status, WNOHANG) };
        if pid <= 0 {
            break;
        }
        if let Some(id) = by_pid.remove(&pid) {
            if let Some(e) = execs.get_mut(&id) {
                e.main_alive = false;
            }
            send_event(EV_EXITED, id, status as i64);
        }
    }
    settle(execs);
}

/// Forgets the execs whose group is empty, reporting the watched ones.
fn settle(execs: &mut HashMap<u64, Exec>) {
    execs.retain(|id, e| {
        if e.main_alive {
            return true;
        }
        // SAFETY: signal 0 only checks the group for processes.
        let empty = unsafe { kill(-e.pgid, 0) } != 0 && errno() == ESRCH;
        if empty && e.watched {
            send_event(EV_GONE, *id, 0);
        }
        !empty
    });
}

fn main() {
    // The double put this binary in the sandbox's root to exec it: leave no
    // trace of it there.
    if let Some(me) = std::env::args().nth(1).and_then(|p| CString::new(p).ok()) {
        // SAFETY: a NUL-terminated path.
        unsafe { unlink(me.as_ptr()) };
    }
    // SAFETY: plain syscalls on this process's own state.
    let sigfd = unsafe {
        let mut set = SigSet([0; 16]);
        sigemptyset(&mut set);
        sigaddset(&mut set, SIGCHLD);
        sigprocmask(SIG_BLOCK, &set, std::ptr::null_mut());
        signalfd(-1, &set, SFD_CLOEXEC)
    };
    let mut execs: HashMap<u64, Exec> = HashMap::new();
    let mut by_pid: HashMap<c_int, u64> = HashMap::new();
    loop {
        let mut fds = [
            PollFd {
                fd: 0,
                events: POLLIN,
                revents: 0,
            },
            PollFd {
                fd: sigfd,
                events: POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        let n = unsafe { poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if errno() == EINTR {
                continue;
            }
            break;
        }
        if fds[1].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: a signalfd read of one siginfo record.
            unsafe { read(sigfd, info.as_mut_ptr().cast(), info.len()) };
            reap(&mut execs, &mut by_pid);
        }
        if fds[0].revents == 0 {
            continue;
        }
        let Some((op, rfds, body)) = next_request() else {
            break;
        };
        match op {
            OP_EXEC => match spawn(&rfds, &body) {
                Ok((id, pid)) => {
                    by_pid.insert(pid, id);
                    execs.insert(
                        id,
                        Exec {
                            pgid: pid,
                            main_alive: true,
                            watched: false,
                        },
                    );
                }
                Err((id, status)) => send_event(EV_EXITED, id, status),
            },
            OP_KILL => {
                let id = u64::from_le_bytes(
                    body.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .unwrap_or([0; 8]),
                );
                let sig = i32::from_le_bytes(
                    body.get(8..12)
                        .and_then(|b| b.try_into().ok())
                        .unwrap_or([0; 4]),
                );
                match execs.get_mut(&id) {
                    Some(e) => {
                        // SAFETY: the group's pid stays reserved while it has members.
                        unsafe { kill(-e.pgid, sig) };
                        e.watched |= sig == SIGKILL;
                        settle(&mut execs);
                    }
                    None if sig == SIGKILL => send_event(EV_GONE, id, 0),
                    None => {}
                }
            }
            OP_REMOUNT => send_event(EV_REMOUNTED, 0, remount(&rfds, &body)),
            _ => {}
        }
        for fd in rfds {
            // SAFETY: fds this process received and owns.
            unsafe { close(fd) };
        }
    }
}
