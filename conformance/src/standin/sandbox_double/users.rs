//! The users a sandbox has.
//!
//! On the daemon a sandbox is a VM: its root may become any uid, such as
//! the preset images' users (`python-user` and `node`, uid 1000). The
//! double's sandboxes are user namespaces, which have only the ids their
//! maps give them, so:
//!
//! - As host root ([`Mapping::Range`]), a sandbox maps its root to host
//!   root, as it always did (what guest root writes into the image's layer
//!   is root's there too), and its ids 1..=65535 to a block of host ids no
//!   host account uses ([`HOST_ID_BASE`] + id), so guest root can drop to
//!   uid 1000 (and not back). Only a privileged process outside may write
//!   such a map, so hakoniwa builds the sandbox without a user namespace
//!   (as host root it needs none), and its PID 1, before it execs the init,
//!   enters one (with a mount namespace that one owns, so the init can
//!   still attach fresh image overlays), tells the double on the wire, and
//!   waits until the double has written the maps.
//! - Otherwise ([`Mapping::Single`]), hakoniwa maps the double's own uid to
//!   guest root and there is no other user: setuid(1000) fails in the guest.
//!   [`unmodelled`] says so, and the tests that need a guest user skip.
//!   (`newuidmap` with a subordinate range would give a non-root double more
//!   ids, but files a guest user leaves in a sandbox's scratch would then
//!   belong to ids the double cannot delete; it is not used.)

use std::sync::atomic::{AtomicBool, Ordering};

/// Guest ids 0..GUEST_IDS exist in a [`Mapping::Range`] sandbox.
pub(crate) const GUEST_IDS: u32 = 65_536;

/// Guest id `n` (1..GUEST_IDS) is host id `HOST_ID_BASE + n`: above the
/// ranges distributions, systemd and subordinate-id files hand out, so no
/// host account (and no other container) owns what a guest user writes.
pub(crate) const HOST_ID_BASE: u32 = 0x7000_0000;

/// Set once a root double's sandboxes could not map a range of ids.
static RANGE_FAILED: AtomicBool = AtomicBool::new(false);

/// How a sandbox's user namespace maps ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Guest root is host root, guest ids 1.. are `HOST_ID_BASE + id`.
    Range,
    /// Only the double's own uid, as guest root.
    Single,
}

impl Mapping {
    /// What this host allows, before the isolation probe has tried it.
    pub(crate) fn for_host() -> Mapping {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 && !RANGE_FAILED.load(Ordering::SeqCst) {
            Mapping::Range
        } else {
            Mapping::Single
        }
    }

    /// The host id of guest id `id`, where the double may own files for it.
    pub(crate) fn host_id(self, id: u32) -> Option<u32> {
        match self {
            Mapping::Range if id == 0 => Some(0),
            Mapping::Range if id < GUEST_IDS => Some(HOST_ID_BASE + id),
            _ => None,
        }
    }
}

/// Records that a root double fell back to [`Mapping::Single`].
pub(crate) fn range_failed() {
    RANGE_FAILED.store(true, Ordering::SeqCst);
}

/// Why guest code in the double's sandboxes cannot become another user
/// (the preset images' uid 1000), as it can in the daemon's VMs: `None`
/// when it can. Tests and cases about the guest user skip with this.
pub fn unmodelled() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "the sandbox double cannot model the guest's unprivileged user on this host: it is \
             not root, so its sandboxes map one uid (guest root) and no other (run it as root)",
        );
    }
    RANGE_FAILED.load(Ordering::SeqCst).then_some(
        "the sandbox double cannot model the guest's unprivileged user on this host: its \
         sandboxes could not map a range of uids (see the double's warning), so they have \
         guest root and no other user",
    )
}

/// The map of a [`Mapping::Range`] sandbox, for `/proc/<pid>/{uid,gid}_map`.
fn range_map() -> String {
    format!("0 0 1\n1 {} {}\n", HOST_ID_BASE + 1, GUEST_IDS - 1)
}

/// What a [`Mapping::Range`] sandbox's PID 1 tells the double once it is
/// in its own user namespace, and what the double answers once the maps
/// are written.
const ENTERED: u8 = b'u';
const MAPPED: u8 = b'g';

/// The PID 1 side: in the sandbox's PID 1 (host root, single-threaded,
/// after the pivot to its root, fd 0 the wire to the double), enters a new
/// user namespace and a mount namespace it owns, waits until the double
/// has written the namespace's maps, then keeps root's group only.
/// Async-signal-safe calls only. `false`: the sandbox cannot run.
pub(crate) fn enter_in_init() -> bool {
    // SAFETY: plain syscalls on this process's own state and its fd 0.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
            return false;
        }
        if libc::write(0, [ENTERED].as_ptr().cast(), 1) != 1 {
            return false;
        }
        let mut said = 0u8;
        if libc::read(0, (&mut said as *mut u8).cast(), 1) != 1 || said != MAPPED {
            return false;
        }
        let root: [libc::gid_t; 1] = [0];
        libc::setgroups(1, root.as_ptr()) == 0
    }
}

/// The double's side of [`enter_in_init`]: waits (up to 20 s) for the
/// sandbox's PID 1, `init` (a host pid), to have entered its user
/// namespace, writes the namespace's maps (as host root: a privileged
/// writer may map any range), and lets it go on.
pub(crate) fn map_from_host(
    wire: &std::os::unix::net::UnixStream,
    init: impl FnOnce() -> Option<libc::pid_t>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut w = wire;
    w.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    let mut said = [0u8];
    let read = w.read_exact(&mut said);
    w.set_read_timeout(None)?;
    read?;
    if said[0] != ENTERED {
        return Err(std::io::Error::other(
            "the sandbox's init said something else",
        ));
    }
    let pid = init().ok_or_else(|| std::io::Error::other("the sandbox's init is gone"))?;
    let map = range_map();
    for file in ["gid_map", "uid_map"] {
        // One write, as the kernel wants a map.
        std::fs::write(format!("/proc/{pid}/{file}"), &map)
            .map_err(|e| std::io::Error::other(format!("writing the sandbox's {file}: {e}")))?;
    }
    w.write_all(&[MAPPED])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_ids_map_into_the_base_block_and_root_onto_root() {
        assert_eq!(Mapping::Range.host_id(0), Some(0));
        assert_eq!(Mapping::Range.host_id(1000), Some(HOST_ID_BASE + 1000));
        assert_eq!(Mapping::Range.host_id(GUEST_IDS), None);
        assert_eq!(Mapping::Single.host_id(1000), None);
        assert_eq!(
            range_map(),
            format!("0 0 1\n1 {} 65535\n", HOST_ID_BASE + 1)
        );
        // Every guest id maps below u32::MAX (the kernel's "no id").
        assert!(HOST_ID_BASE.checked_add(GUEST_IDS).is_some());
    }
}
