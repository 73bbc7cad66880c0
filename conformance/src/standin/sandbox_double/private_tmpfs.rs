//! Where sandboxes' private directories live on the host.
//!
//! In the real daemon a guest's `/tmp`, `/run`, `/dev/shm` and new top-level
//! directories are private tmpfs: memory, not disk (`docs/sandbox.md`). The
//! double keeps each sandbox's private tree in one host directory, so it puts
//! that directory on the host's tmpfs (`/dev/shm`) when there is a usable one:
//! a tmpfs, mounted with exec allowed (guests load native modules from
//! `/tmp`), and with room for many sandboxes. Otherwise (a container's 64 MiB
//! `/dev/shm`, say) it falls back to the host's temp dir, which behaves the
//! same but pays disk writes. `SCR_DOUBLE_SCRATCH_DIR` overrides both.

use std::path::{Path, PathBuf};

/// The override, for hosts whose tmpfs lives elsewhere.
pub const SCRATCH_DIR_VAR: &str = "SCR_DOUBLE_SCRATCH_DIR";

/// Free space a host tmpfs needs before sandboxes go there.
const MIN_FREE_BYTES: u64 = 4 << 30;

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The parent directory of every sandbox's private tree.
pub fn scratch_parent() -> PathBuf {
    if let Some(dir) = std::env::var_os(SCRATCH_DIR_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if usable_tmpfs(shm) {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A writable tmpfs that allows exec and has [`MIN_FREE_BYTES`] free.
#[allow(
    clippy::unnecessary_cast,
    reason = "statfs/statvfs field types differ between architectures"
)]
fn usable_tmpfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; both structs are plain
    // data that the calls fill in.
    let (fs, vfs) = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        let mut vfs: libc::statvfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut fs) != 0 || libc::statvfs(c.as_ptr(), &mut vfs) != 0 {
            return false;
        }
        (fs, vfs)
    };
    let free = (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64);
    fs.f_type as i64 == TMPFS_MAGIC
        && vfs.f_flag & (libc::ST_NOEXEC | libc::ST_RDONLY) == 0
        && free >= MIN_FREE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_directory_is_not_a_usable_tmpfs_and_a_missing_one_is_refused() {
        // The crate's own directory is on a disk (or overlay), never tmpfs.
        assert!(!usable_tmpfs(Path::new(env!("CARGO_MANIFEST_DIR"))));
        assert!(!usable_tmpfs(Path::new("/nonexistent/scr")));
    }

    #[test]
    fn the_parent_is_writable_and_the_override_wins() {
        let p = scratch_parent();
        assert!(p.is_dir(), "{}", p.display());
        let probe = p.join(format!("scr-probe-{}", std::process::id()));
        std::fs::create_dir(&probe).expect("writable");
        std::fs::remove_dir(&probe).unwrap();
    }
}
