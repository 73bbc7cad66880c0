//! A sandbox's private root on the host (its scratch directory and the
//! guest skeleton in it), and how the host's top level maps into every
//! sandbox.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uuid::Uuid;

use super::super::guest_path::GuestView;
use super::super::image_layer::ImageLayer;

/// Top-level host directories an image rootfs is layered over. `usr` and
/// `etc` are required.
const HOST_DIRS: [&str; 8] = [
    "usr", "etc", "bin", "sbin", "lib", "lib64", "lib32", "libx32",
];

/// How the host's top level maps into every sandbox.
#[derive(Debug, Clone)]
pub(crate) struct HostLayout {
    /// Names overlaid from the host (real directories there).
    pub(crate) lowered: Vec<String>,
    /// Names that are symlinks on the host (e.g. `bin -> usr/bin` on a
    /// merged-/usr system); recreated as the same symlinks in each scratch.
    pub(crate) symlinks: Vec<(String, PathBuf)>,
}

impl HostLayout {
    /// Reads the host's top level. Errors when `/usr` or `/etc` is missing:
    /// without them no guest program can run.
    pub(crate) fn detect() -> Result<HostLayout, String> {
        let mut lowered = Vec::new();
        let mut symlinks = Vec::new();
        for name in HOST_DIRS {
            let p = Path::new("/").join(name);
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Ok(target) = std::fs::read_link(&p) {
                    symlinks.push((name.to_string(), target));
                }
            } else if meta.is_dir() {
                lowered.push(name.to_string());
            }
        }
        for required in ["usr", "etc"] {
            if !lowered.iter().any(|n| n == required) {
                return Err(format!("host has no /{required} directory to layer"));
            }
        }
        Ok(HostLayout { lowered, symlinks })
    }
}

/// A sandbox's private root on the host.
#[derive(Debug)]
pub(crate) struct Scratch {
    view: GuestView,
}

impl Scratch {
    /// Creates `scr-sandbox-<id>` (on the host's tmpfs when usable, see
    /// `private_tmpfs`) with the guest's skeleton:
    /// mount points for the image's rootfs directories, host symlinks, and
    /// the private `/tmp` and `/run`.
    pub(crate) fn create(
        layout: &HostLayout,
        layer: Arc<ImageLayer>,
        id: Uuid,
    ) -> std::io::Result<Scratch> {
        let root = crate::standin::sandbox_double::private_tmpfs::scratch_parent()
            .join(format!("scr-sandbox-{id}"));
        std::fs::create_dir(&root)?;
        let result = (|| {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
            for (dir, mode) in [
                ("tmp", 0o1777),
                ("run", 0o755),
                ("dev", 0o755),
                ("proc", 0o555),
            ] {
                let p = root.join(dir);
                std::fs::create_dir(&p)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
            }
            for d in layer.dirs() {
                std::fs::create_dir(root.join(&d.name))?;
            }
            for (name, target) in &layout.symlinks {
                symlink(target, root.join(name))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&root);
            return Err(e);
        }
        Ok(Scratch {
            view: GuestView::new(root, layer),
        })
    }

    /// The scratch directory.
    pub(crate) fn path(&self) -> &Path {
        self.view.root()
    }

    /// The guest's view of this scratch.
    pub(crate) fn view(&self) -> &GuestView {
        &self.view
    }

    /// Deletes the scratch tree. Only call once no exec is alive in it.
    pub(crate) fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.path()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}
