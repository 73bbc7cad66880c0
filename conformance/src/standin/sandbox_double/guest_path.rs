//! Guest-path resolution: what a path means *inside* a sandbox, computed on
//! the host.
//!
//! A sandbox's root is a host scratch directory with its image's rootfs
//! directories (`/usr`, `/etc`, `/opt`, ...: host lower + shared upper, see
//! `image_layer`) mounted over it, plus `/dev` and `/proc` that exist only
//! inside its namespaces. Host-side code that touches guest
//! files (the fs ops, the exec's PATH lookup) must resolve paths the way the
//! guest kernel would: `..` stops at the guest root, and a symlink's target —
//! absolute or relative — is interpreted in the guest's tree, never the
//! host's. Resolving component by component here, and opening the result
//! with `RESOLVE_IN_ROOT` (see `fs_ops`), keeps every access confined to the
//! sandbox's own view.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::image_layer::ImageLayer;

/// Symlinks followed before giving up, as the kernel's `MAXSYMLINKS`.
const MAX_SYMLINK_HOPS: usize = 40;

/// Top-level guest directories that exist only inside an exec's namespaces
/// (a fresh devfs and procfs per exec); the host has nothing to show there.
const SPECIAL: [&str; 2] = ["dev", "proc"];

/// Which part of the guest tree a path lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Region {
    /// The sandbox's private, writable scratch tree.
    Scratch,
    /// The image's rootfs (`/usr`, `/etc`, `/opt`...), shared by every
    /// sandbox of the image.
    Image,
    /// `/dev` or `/proc`: per-exec mounts, unreachable from the host.
    Special,
}

/// A guest path with every symlink followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Absolute, normalised guest path containing no symlinks.
    pub(crate) guest: PathBuf,
    pub(crate) region: Region,
    /// Where the guest path lives on the host (meaningless for `Special`;
    /// for `Image`, the topmost layer holding it, or a path that exists
    /// nowhere when it does not exist).
    pub(crate) host: PathBuf,
}

/// Why a guest path cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error("path must be absolute: {0}")]
    Relative(String),
    #[error("path contains a NUL byte")]
    Nul,
    #[error("too many levels of symbolic links")]
    Loop,
}

/// One sandbox's filesystem as its guest sees it.
#[derive(Debug, Clone)]
pub(crate) struct GuestView {
    root: PathBuf,
    layer: Arc<ImageLayer>,
    /// The sandbox's own mount table as the host reaches it (its init's
    /// `/proc/<pid>/root`), once booted: where a mount the guest made
    /// read-only shows.
    live_root: Arc<OnceLock<PathBuf>>,
}

impl GuestView {
    /// `root` is the scratch directory; `layer` the image's rootfs layer.
    pub(crate) fn new(root: PathBuf, layer: Arc<ImageLayer>) -> GuestView {
        GuestView {
            root,
            layer,
            live_root: Arc::default(),
        }
    }

    /// The booted sandbox's mounts are reachable at `live_root`.
    pub(crate) fn booted(&self, live_root: PathBuf) {
        let _ = self.live_root.set(live_root);
    }

    /// Whether the mount a resolved guest path (or its nearest existing
    /// ancestor) is on is read-only inside the sandbox, as the daemon's
    /// in-VM file ops would find it: a guest that remounted the image's
    /// directories read-only gets `EROFS` from `fs::write` there too.
    pub(crate) fn read_only(&self, guest: &Path) -> bool {
        let Some(live) = self.live_root.get() else {
            return false;
        };
        let mut at = guest;
        loop {
            let inside = live.join(at.strip_prefix("/").unwrap_or(at));
            match nix::sys::statvfs::statvfs(&inside) {
                Ok(s) => return s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY),
                Err(nix::errno::Errno::ENOENT) => match at.parent() {
                    Some(up) => at = up,
                    None => return false,
                },
                Err(_) => return false,
            }
        }
    }

    /// The image's shared rootfs layer.
    pub(crate) fn layer(&self) -> &ImageLayer {
        &self.layer
    }

    /// The same layer, to hold on to.
    pub(crate) fn shared_layer(&self) -> Arc<ImageLayer> {
        self.layer.clone()
    }

    /// The scratch directory on the host.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The region an absolute, normalised guest path is in.
    pub(crate) fn region_of(&self, guest: &Path) -> Region {
        let first = guest
            .components()
            .find_map(|c| match c {
                Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                _ => None,
            })
            .unwrap_or_default();
        if SPECIAL.contains(&first.as_str()) {
            Region::Special
        } else if self.layer.dir(&first).is_some() {
            Region::Image
        } else {
            Region::Scratch
        }
    }

    /// Host location of an absolute, normalised guest path.
    pub(crate) fn host_path(&self, guest: &Path) -> PathBuf {
        match self.region_of(guest) {
            Region::Image => match self.layer.lookup(guest) {
                Some(found) => found.path().to_path_buf(),
                None => self.layer.nowhere(guest),
            },
            Region::Scratch | Region::Special => {
                self.root.join(guest.strip_prefix("/").unwrap_or(guest))
            }
        }
    }

    /// Resolves `path` as the guest kernel would. With `follow_final` false
    /// a symlink in the last component is left as is (lstat semantics).
    /// Components that do not exist are kept lexically: nothing below a
    /// missing directory can be a symlink.
    pub(crate) fn resolve(&self, path: &str, follow_final: bool) -> Result<Resolved, ResolveError> {
        if path.contains('\0') {
            return Err(ResolveError::Nul);
        }
        if !path.starts_with('/') {
            return Err(ResolveError::Relative(path.to_string()));
        }
        let mut pending: VecDeque<OsString> = VecDeque::new();
        push_components(&mut pending, Path::new(path), false);
        let mut stack: Vec<OsString> = Vec::new();
        let mut hops = 0usize;

        while let Some(comp) = pending.pop_front() {
            if comp == ".." {
                stack.pop();
                continue;
            }
            stack.push(comp);
            let is_final = pending.is_empty();
            if is_final && !follow_final {
                break;
            }
            let guest = join_guest(&stack);
            if self.region_of(&guest) == Region::Special {
                // Per-exec mounts: nothing there is host-visible, so no
                // symlink can be followed; `..` still climbs back out.
                continue;
            }
            let host = self.host_path(&guest);
            let Ok(meta) = std::fs::symlink_metadata(&host) else {
                continue;
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(ResolveError::Loop);
            }
            let Ok(target) = std::fs::read_link(&host) else {
                continue;
            };
            stack.pop();
            if target.is_absolute() {
                stack.clear();
            }
            push_components(&mut pending, &target, true);
        }

        let guest = join_guest(&stack);
        let region = self.region_of(&guest);
        let host = self.host_path(&guest);
        Ok(Resolved {
            guest,
            region,
            host,
        })
    }
}

/// Queues the normal and `..` components of `p`, at the front when
/// `front` (a symlink target replaces the link in place).
fn push_components(queue: &mut VecDeque<OsString>, p: &Path, front: bool) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for c in comps.into_iter().rev() {
            queue.push_front(c);
        }
    } else {
        queue.extend(comps);
    }
}

fn join_guest(stack: &[OsString]) -> PathBuf {
    let mut p = PathBuf::from("/");
    for c in stack {
        p.push(c);
    }
    p
}

/// Splits an absolute guest path into its parent and final name. `None`
/// when the path names no entry of its own (`/`, or ends in `.`/`..`).
pub(crate) fn split_parent(path: &str) -> Option<(String, OsString)> {
    let p = Path::new(path);
    match p.components().next_back() {
        Some(Component::Normal(name)) => {
            let parent = p.parent().map(|q| q.to_string_lossy().into_owned())?;
            let parent = if parent.is_empty() {
                "/".to_string()
            } else {
                parent
            };
            Some((parent, name.to_os_string()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    use crate::standin::sandbox_double::image_layer::testing::TempLayer;

    fn view() -> ((tempdir::Dir, TempLayer), GuestView) {
        let dir = tempdir::Dir::new();
        let layer = TempLayer::new();
        let v = GuestView::new(dir.path.clone(), layer.0.clone());
        ((dir, layer), v)
    }

    /// Minimal self-cleaning temp dir (no extra dev-dependency needed).
    mod tempdir {
        pub(crate) struct Dir {
            pub(crate) path: std::path::PathBuf,
        }
        impl Dir {
            pub(crate) fn new() -> Dir {
                let path =
                    std::env::temp_dir().join(format!("guest-path-test-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir_all(&path).expect("temp dir");
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    #[test]
    fn dotdot_stops_at_the_guest_root() {
        let (_d, v) = view();
        let r = v.resolve("/../../../etc/passwd", true).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/etc/passwd"));
        assert_eq!(r.region, Region::Image);
        assert_eq!(r.host, PathBuf::from("/etc/passwd"));
        let r = v.resolve("/tmp/../../x", true).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/x"));
        assert_eq!(r.host, v.root().join("x"));
    }

    #[test]
    fn absolute_symlinks_are_guest_relative() {
        let ((d, _l), v) = view();
        std::fs::create_dir_all(d.path.join("tmp")).expect("mkdir");
        // A link to "/" must mean the sandbox root, not the host's.
        symlink("/", d.path.join("tmp/up")).expect("symlink");
        let r = v.resolve("/tmp/up/newtop/secret", true).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/newtop/secret"));
        assert_eq!(r.host, d.path.join("newtop/secret"));
        assert_eq!(r.region, Region::Scratch);
    }

    #[test]
    fn relative_symlinks_climb_only_to_the_guest_root() {
        let ((d, _l), v) = view();
        std::fs::create_dir_all(d.path.join("a/b")).expect("mkdir");
        symlink("../../../../../../private", d.path.join("a/b/l")).expect("symlink");
        let r = v.resolve("/a/b/l/.bashrc", true).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/private/.bashrc"));
        assert_eq!(r.host, d.path.join("private/.bashrc"));
    }

    #[test]
    fn symlinks_into_the_image_rootfs_land_there() {
        let ((d, _l), v) = view();
        symlink("usr/bin", d.path.join("bin")).expect("symlink");
        let r = v.resolve("/bin/sh", true).expect("resolves");
        assert_eq!(r.region, Region::Image);
        assert!(r.guest.starts_with("/usr/bin"));
    }

    #[test]
    fn final_symlink_kept_without_follow() {
        let ((d, _l), v) = view();
        symlink("/etc", d.path.join("e")).expect("symlink");
        let r = v.resolve("/e", false).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/e"));
        assert_eq!(r.region, Region::Scratch);
        let r = v.resolve("/e", true).expect("resolves");
        assert_eq!(r.guest, PathBuf::from("/etc"));
    }

    #[test]
    fn loops_and_bad_input_are_errors() {
        let ((d, _l), v) = view();
        symlink("/l2", d.path.join("l1")).expect("symlink");
        symlink("/l1", d.path.join("l2")).expect("symlink");
        assert_eq!(v.resolve("/l1/x", true), Err(ResolveError::Loop));
        assert!(matches!(
            v.resolve("tmp/x", true),
            Err(ResolveError::Relative(_))
        ));
        assert_eq!(v.resolve("/a\0b", true), Err(ResolveError::Nul));
    }

    #[test]
    fn dev_and_proc_are_special() {
        let (_d, v) = view();
        assert_eq!(
            v.resolve("/proc/self/root", true).map(|r| r.region),
            Ok(Region::Special)
        );
        assert_eq!(
            v.resolve("/dev/../dev/null", true).map(|r| r.region),
            Ok(Region::Special)
        );
    }

    #[test]
    fn split_parent_cases() {
        assert_eq!(
            split_parent("/a/b"),
            Some(("/a".to_string(), OsString::from("b")))
        );
        assert_eq!(
            split_parent("/b"),
            Some(("/".to_string(), OsString::from("b")))
        );
        assert_eq!(split_parent("/"), None);
        assert_eq!(split_parent("/a/.."), None);
    }
}
