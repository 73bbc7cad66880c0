//! One shared, writable rootfs layer per image, as the real daemon has.
//!
//! The daemon boots every sandbox of an image from the same cached rootfs
//! and mounts no overlay over it: a write under `/usr`, `/etc`, `/opt`,
//! `/root`... lands in that cache and every later sandbox of the image sees
//! it. Only `/tmp`, `/run`, `/dev/shm` and new top-level directories are
//! private to a sandbox.
//!
//! The double reproduces that without touching a host file. An image's
//! rootfs is the host's `/usr`, `/etc` (and `/bin`, `/lib`... when they are
//! real directories) as read-only *lower* layers, plus one *upper* directory
//! per top-level name in the double's own state directory. Each sandbox
//! mounts an overlay (`userxattr`, so it works inside its user namespace)
//! of lower + the image's shared upper, with a workdir of its own; several
//! overlays may share one upper as long as each has its own workdir.
//! Directories an image has but the double must not take from the host
//! (`/opt`, `/root`, `/home`, `/var`...) are upper-only and bound
//! read-write.
//!
//! overlayfs does not expect its upper layer to change underneath a mount,
//! so the layer keeps a *generation*: every fs op that opens the upper layer
//! and every exec that ends bumps it, and an exec whose sandbox's view is
//! older (another sandbox's exec, or an fs op, may have written since) first
//! mounts fresh overlays (`isolation/vm`). An exec that ends leaves its own
//! sandbox current, so one sandbox's execs in a row remount nothing.
//!
//! One known difference from the daemon's single rootfs: an exec already
//! running when another sandbox writes into a directory it had looked up may
//! not see the new entries (nor may a background process that outlived its
//! exec, nor an exec started after a write that a background process made
//! once its own exec had ended). Execs that start after a write by an exec
//! or an fs op always see it.
//!
//! Host-side code (the fs ops, the exec's PATH lookup) reads the merged
//! tree through [`ImageLayer::lookup`], which applies overlayfs' rules:
//! upper wins, a whiteout (a 0/0 character device) hides the lower entry,
//! and an opaque directory hides the lower directory's children.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use uuid::Uuid;

use super::isolation::HostLayout;

/// Top-level directories of an image rootfs that the double does not take
/// from the host (the host's `/root` or `/home` are none of a guest's
/// business): they start empty, shared by the image's sandboxes.
const IMAGE_ONLY: [(&str, u32); 8] = [
    ("opt", 0o755),
    ("root", 0o700),
    ("home", 0o755),
    ("srv", 0o755),
    ("mnt", 0o755),
    ("media", 0o755),
    ("boot", 0o755),
    ("var", 0o755),
];

/// The xattr overlayfs (mounted with `userxattr`) marks opaque directories
/// with.
const OPAQUE_XATTR: &[u8] = b"user.overlay.opaque\0";

/// One top-level directory of the image rootfs.
#[derive(Debug, Clone)]
pub(crate) struct LayerDir {
    /// Top-level name, e.g. `usr`.
    pub(crate) name: String,
    /// The image's shared writable directory for it.
    pub(crate) upper: PathBuf,
    /// The host directory under it (read-only), if any.
    pub(crate) lower: Option<PathBuf>,
}

/// Where a guest path of the image rootfs lives on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// In the shared writable layer (guest-writable: open it race-free).
    Upper(PathBuf),
    /// In a host directory no guest can modify.
    Lower(PathBuf),
}

impl Found {
    /// The host path, whichever layer holds it.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Found::Upper(p) | Found::Lower(p) => p,
        }
    }
}

/// An image's shared layer: `<root>/upper/<name>` per top-level directory,
/// `<root>/work/<exec>/<name>` for each live exec's overlay workdirs.
#[derive(Debug)]
pub(crate) struct ImageLayer {
    root: PathBuf,
    dirs: Vec<LayerDir>,
    /// Bumped whenever the upper layer may have changed (see module docs).
    generation: Mutex<u64>,
}

impl ImageLayer {
    /// Creates the layer's directories under `root` (which must not exist).
    pub(crate) fn create(root: PathBuf, layout: &HostLayout) -> std::io::Result<ImageLayer> {
        std::fs::create_dir_all(root.join("upper"))?;
        std::fs::create_dir_all(root.join("work"))?;
        let mut dirs = Vec::new();
        for name in &layout.lowered {
            let upper = root.join("upper").join(name);
            std::fs::create_dir(&upper)?;
            let lower = Path::new("/").join(name);
            let mode = std::fs::metadata(&lower)?.permissions().mode() & 0o7777;
            std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(mode))?;
            dirs.push(LayerDir {
                name: name.clone(),
                upper,
                lower: Some(lower),
            });
        }
        for (name, mode) in IMAGE_ONLY {
            let upper = root.join("upper").join(name);
            std::fs::create_dir(&upper)?;
            std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(mode))?;
            dirs.push(LayerDir {
                name: name.to_string(),
                upper,
                lower: None,
            });
        }
        let var_tmp = root.join("upper/var/tmp");
        std::fs::create_dir(&var_tmp)?;
        std::fs::set_permissions(&var_tmp, std::fs::Permissions::from_mode(0o1777))?;
        Ok(ImageLayer {
            root,
            dirs,
            generation: Mutex::new(0),
        })
    }

    fn lock_generation(&self) -> std::sync::MutexGuard<'_, u64> {
        self.generation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current generation: a view mounted now is current with it.
    pub(crate) fn generation(&self) -> u64 {
        *self.lock_generation()
    }

    /// Whether a view current with `seen` is stale; if so, `seen` becomes
    /// the current generation (the caller mounts a fresh view).
    pub(crate) fn catch_up(&self, seen: &mut u64) -> bool {
        let now = *self.lock_generation();
        let stale = now != *seen;
        *seen = now;
        stale
    }

    /// Records that the sandbox whose view is current with `seen` may have
    /// written into the layer: every other view is now stale, while this
    /// one stays current if it was.
    pub(crate) fn wrote(&self, seen: &mut u64) {
        let mut g = self.lock_generation();
        let current = *g == *seen;
        *g += 1;
        if current {
            *seen = *g;
        }
    }

    /// Every top-level directory the layer provides.
    pub(crate) fn dirs(&self) -> &[LayerDir] {
        &self.dirs
    }

    /// The layer directory a top-level name belongs to.
    pub(crate) fn dir(&self, name: &str) -> Option<&LayerDir> {
        self.dirs.iter().find(|d| d.name == name)
    }

    /// Splits an absolute, normalised guest path into its layer directory
    /// and the components below it, for a host-side open of the upper
    /// layer: every sandbox's view becomes stale. `None` outside the layer.
    pub(crate) fn split<'a>(
        &self,
        guest: &'a Path,
    ) -> Option<(&LayerDir, Vec<&'a std::ffi::OsStr>)> {
        *self.lock_generation() += 1;
        self.split_path(guest)
    }

    fn split_path<'a>(&self, guest: &'a Path) -> Option<(&LayerDir, Vec<&'a std::ffi::OsStr>)> {
        let mut comps = guest.components().filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        });
        let first = comps.next()?.to_str()?;
        let dir = self.dir(first)?;
        Some((dir, comps.collect()))
    }

    /// Looks a guest path up in the merged tree without following
    /// symlinks. `None`: it does not exist (or a whiteout hides it).
    pub(crate) fn lookup(&self, guest: &Path) -> Option<Found> {
        let (dir, rel) = self.split_path(guest)?;
        let mut upper = Some(dir.upper.clone());
        let mut lower = dir.lower.clone();
        for name in rel {
            if let Some(u) = upper.as_mut() {
                u.push(name);
                match std::fs::symlink_metadata(&*u) {
                    Ok(m) if is_whiteout(&m) => return None,
                    Ok(m) if m.is_dir() => {
                        if is_opaque(u) {
                            lower = None;
                        }
                    }
                    // A non-directory in upper hides whatever lower has.
                    Ok(_) => lower = None,
                    Err(_) => upper = None,
                }
            }
            if let Some(l) = lower.as_mut() {
                l.push(name);
                if std::fs::symlink_metadata(&*l).is_err() {
                    lower = None;
                }
            }
            if upper.is_none() && lower.is_none() {
                return None;
            }
        }
        match (upper, lower) {
            (Some(u), _) => Some(Found::Upper(u)),
            (None, Some(l)) => Some(Found::Lower(l)),
            (None, None) => None,
        }
    }

    /// A host path that exists nowhere, for a guest path that does not
    /// exist: callers that stat it see ENOENT.
    pub(crate) fn nowhere(&self, guest: &Path) -> PathBuf {
        self.root
            .join("absent")
            .join(guest.strip_prefix("/").unwrap_or(guest))
    }

    /// Fresh overlay workdirs for one mount of the layer (one per lowered
    /// directory).
    pub(crate) fn workdirs(&self) -> std::io::Result<ExecWorkdirs> {
        let base = self.root.join("work").join(Uuid::new_v4().to_string());
        std::fs::create_dir(&base)?;
        let dirs = ExecWorkdirs { base };
        for d in self.dirs.iter().filter(|d| d.lower.is_some()) {
            std::fs::create_dir(dirs.for_dir(&d.name))?;
        }
        Ok(dirs)
    }

    /// Deletes the whole layer (every image write). Only once no exec runs.
    pub(crate) fn remove(&self) -> std::io::Result<()> {
        remove_tree(&self.root)
    }
}

/// One mount's overlay workdirs; removed once its sandbox is gone.
#[derive(Debug)]
pub(crate) struct ExecWorkdirs {
    base: PathBuf,
}

impl ExecWorkdirs {
    /// The workdir of top-level directory `name`.
    pub(crate) fn for_dir(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }

    /// Deletes them (overlayfs leaves a mode-000 `work` directory inside).
    pub(crate) fn remove(&self) {
        let _ = remove_tree(&self.base);
    }
}

/// `rm -rf` that also gets through the mode-000 directories overlayfs
/// leaves in a workdir when not running as root.
fn remove_tree(root: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            chmod_dirs(root);
            match std::fs::remove_dir_all(root) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
        ok => ok,
    }
}

fn chmod_dirs(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                chmod_dirs(&e.path());
            }
        }
    }
}

/// Whether an upper entry is an overlayfs whiteout.
pub(crate) fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Whether an upper directory is marked opaque.
pub(crate) fn is_opaque(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: NUL-terminated path and name; the buffer outlives the call.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            OPAQUE_XATTR.as_ptr().cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
}

/// Marks a directory (by fd) opaque, so a recreated directory does not
/// show its deleted lower twin's children.
pub(crate) fn mark_opaque(fd: &impl std::os::fd::AsRawFd) -> std::io::Result<()> {
    // SAFETY: a valid fd, a NUL-terminated name, a one-byte value.
    let r = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            OPAQUE_XATTR.as_ptr().cast(),
            b"y".as_ptr().cast(),
            1,
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A layer in a throwaway directory, removed on drop.
    use super::*;
    use std::sync::Arc;

    pub(crate) struct TempLayer(pub Arc<ImageLayer>);

    impl TempLayer {
        pub(crate) fn new() -> TempLayer {
            let layout = HostLayout::detect().expect("host layout");
            let root = std::env::temp_dir().join(format!("scr-layer-test-{}", Uuid::new_v4()));
            TempLayer(Arc::new(ImageLayer::create(root, &layout).expect("layer")))
        }
    }

    impl Drop for TempLayer {
        fn drop(&mut self) {
            let _ = self.0.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TempLayer;
    use super::*;

    #[test]
    fn upper_wins_whiteouts_hide_and_absent_is_none() {
        let t = TempLayer::new();
        let l = &t.0;
        assert_eq!(
            l.lookup(Path::new("/usr/bin")),
            Some(Found::Lower(PathBuf::from("/usr/bin")))
        );
        assert_eq!(l.lookup(Path::new("/usr/no-such-dir-here")), None);
        let usr = &l.dir("usr").expect("usr").upper;
        std::fs::create_dir(usr.join("bin")).expect("mkdir");
        std::fs::write(usr.join("bin/planted"), "x").expect("write");
        assert_eq!(
            l.lookup(Path::new("/usr/bin/planted")),
            Some(Found::Upper(usr.join("bin/planted")))
        );
        // A lower file under an upper dir that does not shadow it.
        assert!(matches!(
            l.lookup(Path::new("/usr/bin/env")),
            Some(Found::Lower(_))
        ));
        nix::sys::stat::mknod(
            &usr.join("bin/env"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .expect("whiteout");
        assert_eq!(l.lookup(Path::new("/usr/bin/env")), None);
        assert!(std::path::Path::new("/usr/bin/env").exists(), "host intact");
    }

    #[test]
    fn image_only_dirs_start_empty_and_do_not_show_the_host() {
        let t = TempLayer::new();
        let root = t.0.lookup(Path::new("/root")).expect("/root exists");
        assert!(matches!(root, Found::Upper(_)));
        assert_eq!(std::fs::read_dir(root.path()).expect("ls").count(), 0);
        assert_eq!(t.0.lookup(Path::new("/root/.cargo")), None);
        assert!(t.0.lookup(Path::new("/var/tmp")).is_some());
        assert_eq!(t.0.lookup(Path::new("/tmp")), None, "not a layer dir");
    }
}
