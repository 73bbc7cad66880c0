//! The sandbox network of a `network:true` sandbox, as the real daemon
//! gives it (`docs/sandbox.md`): the guest has its own
//! network, where one gateway address reaches the host's `127.0.0.1` on
//! any port and nothing else on the host's loopback (the guest's own
//! 127.0.0.0/8 never leaves it), while outbound traffic goes out through
//! the host.
//!
//! Each such sandbox gets a network namespace of its own, with `lo` up and
//! Debian's `slirp4netns` attached as its NIC: slirp's gateway `10.0.2.2`
//! is the host's `127.0.0.1`, its `10.0.2.3` resolves names, and the
//! default route leaves through the host. Every exec of the sandbox joins
//! that namespace (see [`super::isolation::Isolation::spawn_in`]), so it is
//! one network per VM, as on the daemon.
//!
//! Without `slirp4netns` on the host the double falls back to sharing the
//! host's network (the gateway is then 127.0.0.1 itself) and says so once.
//! It then cannot model the gateway (guests reach every host loopback
//! address, 127.0.0.2 included): [`unmodelled`] says so, with the fix, and
//! the suite skips the cases and the tests that depend on it.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::limits::PackageRoute;

/// The address guests reach the host's 127.0.0.1 at (slirp4netns' gateway).
pub const GATEWAY: &str = "10.0.2.2";

/// The address guests reach the host's loopback at when the host has no
/// `slirp4netns`: the double then shares the host's network.
pub(crate) const SHARED_GATEWAY: &str = "127.0.0.1";

/// The slirp4netns binary, when the host has one.
fn slirp_binary() -> Option<&'static str> {
    static FOUND: OnceLock<Option<&'static str>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let found = ["/usr/bin/slirp4netns", "/usr/local/bin/slirp4netns"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file());
        if found.is_none() {
            tracing::warn!(
                "slirp4netns is not installed: network:true sandboxes share the host's network, so guests reach every host loopback address (apt-get install slirp4netns)"
            );
        }
        found
    })
}

/// What the double cannot model on this host, with the fix: `None` when
/// `network:true` sandboxes get their own network behind the gateway.
pub fn unmodelled() -> Option<&'static str> {
    slirp_binary().is_none().then_some(
        "the sandbox double cannot model the daemon's sandbox gateway on this host: \
         slirp4netns is not installed (apt-get install slirp4netns), so network:true \
         sandboxes share the host's network and reach every host loopback address",
    )
}

/// The address a `network:true` guest reaches the host's 127.0.0.1 at on
/// this host: [`GATEWAY`], or 127.0.0.1 itself where the double shares the
/// host's network.
pub fn gateway() -> &'static str {
    if slirp_binary().is_some() {
        GATEWAY
    } else {
        SHARED_GATEWAY
    }
}

/// One sandbox's network: its namespace and the slirp4netns serving it.
/// Dropping it ends slirp4netns; the namespace goes with its last process.
pub(crate) struct GuestNet {
    ns: OwnedFd,
    child: Child,
    /// slirp4netns exits when this, the write end of its `--exit-fd`, closes
    /// (also when this process dies, so it never outlives the double).
    exit_w: Option<OwnedFd>,
}

impl std::fmt::Debug for GuestNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestNet")
            .field("slirp_pid", &self.child.id())
            .finish()
    }
}

/// Why a sandbox network could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetError {
    #[error("cannot create a network namespace: {0}")]
    Namespace(std::io::Error),
    #[error("cannot start slirp4netns: {0}")]
    Spawn(std::io::Error),
    #[error("slirp4netns did not come up: {0}")]
    NotReady(String),
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid two-int buffer; on success both are new fds
    // that nothing else owns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A next hop on slirp's network that nobody answers for.
const NOWHERE: [u8; 4] = [10, 0, 2, 99];

/// Points the namespace's default route at [`NOWHERE`]: the gateway and
/// DNS addresses (on-link, 10.0.2.0/24) still answer; everything else waits
/// for a neighbour that never replies, then fails.
fn nowhere_but_the_gateway(ns: &OwnedFd) -> std::io::Result<()> {
    let ns = ns.as_raw_fd();
    std::thread::spawn(move || -> std::io::Result<()> {
        let sockaddr = |ip: [u8; 4]| {
            // SAFETY: an all-zero sockaddr_in is valid.
            let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_addr.s_addr = u32::from_ne_bytes(ip);
            // SAFETY: sockaddr_in and sockaddr have the same size on Linux.
            unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(a) }
        };
        let route = |gateway: [u8; 4], dev: &std::ffi::CStr| {
            // SAFETY: an all-zero rtentry is valid; pointers set below.
            let mut r: libc::rtentry = unsafe { std::mem::zeroed() };
            r.rt_dst = sockaddr([0; 4]);
            r.rt_genmask = sockaddr([0; 4]);
            r.rt_gateway = sockaddr(gateway);
            r.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
            r.rt_dev = dev.as_ptr() as *mut libc::c_char;
            r
        };
        // SAFETY: plain syscalls on this thread's own namespace and a
        // socket it owns; the rtentry and its device name outlive them.
        unsafe {
            if libc::setns(ns, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if sock < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let sock = OwnedFd::from_raw_fd(sock);
            let dev = c"tap0";
            let old = route([10, 0, 2, 2], dev);
            if libc::ioctl(sock.as_raw_fd(), libc::SIOCDELRT, &old) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let new = route(NOWHERE, dev);
            if libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT, &new) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    })
    .join()
    .map_err(|_| std::io::Error::other("the route thread panicked"))?
}

/// A fresh network namespace with `lo` up, held by an fd.
fn new_namespace() -> std::io::Result<OwnedFd> {
    // unshare(2) moves the calling thread only; a throwaway thread keeps
    // every other thread of the double in the host's namespace.
    std::thread::spawn(|| -> std::io::Result<OwnedFd> {
        // SAFETY: plain syscalls on this thread's own namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        super::isolation::loopback_up();
        let f = std::fs::File::open("/proc/thread-self/ns/net")?;
        Ok(OwnedFd::from(f))
    })
    .join()
    .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
}

impl GuestNet {
    /// A sandbox network, or `Ok(None)` when the host has no slirp4netns.
    /// Blocking: call it off the async runtime.
    pub(crate) fn open(route: PackageRoute) -> Result<Option<GuestNet>, NetError> {
        let Some(slirp) = slirp_binary() else {
            return Ok(None);
        };
        let ns = new_namespace().map_err(NetError::Namespace)?;
        let (ready_r, ready_w) = pipe().map_err(NetError::Spawn)?;
        let (exit_r, exit_w) = pipe().map_err(NetError::Spawn)?;
        let ns_path = format!("/proc/{}/fd/{}", std::process::id(), ns.as_raw_fd());
        let (ready_fd, exit_fd) = (ready_w.as_raw_fd(), exit_r.as_raw_fd());
        let mut cmd = Command::new(slirp);
        cmd.args([
            "--configure",
            "--mtu=65520",
            "--netns-type=path",
            &format!("--ready-fd={ready_fd}"),
            &format!("--exit-fd={exit_fd}"),
            &ns_path,
            "tap0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only fcntl, which is async-signal-safe, between fork and
        // exec: the two pipe ends slirp4netns is told about survive exec.
        unsafe {
            cmd.pre_exec(move || {
                for fd in [ready_fd, exit_fd] {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(NetError::Spawn)?;
        // Our copies of slirp's ends: closing the ready writer lets the read
        // below see EOF if slirp dies before it is ready.
        drop(ready_w);
        drop(exit_r);
        let mut byte = [0u8; 1];
        let mut reader = std::fs::File::from(ready_r);
        match reader.read(&mut byte) {
            Ok(1) => {}
            other => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(NetError::NotReady(format!("{other:?}, exit {status:?}")));
            }
        }
        let net = GuestNet {
            ns,
            child,
            exit_w: Some(exit_w),
        };
        if route == PackageRoute::Unreachable {
            nowhere_but_the_gateway(&net.ns).map_err(NetError::Namespace)?;
        }
        Ok(Some(net))
    }

    /// The namespace fd, for `setns` before a spawn.
    pub(crate) fn ns_fd(&self) -> libc::c_int {
        self.ns.as_raw_fd()
    }
}

impl Drop for GuestNet {
    fn drop(&mut self) {
        self.exit_w.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
