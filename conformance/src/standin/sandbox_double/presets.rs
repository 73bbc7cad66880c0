//! What the double's `python` and `node` images hold beyond the host's
//! `/usr` and `/etc`, so that what a worker can observe of them matches the
//! daemon's preset images (iii-hq/iii `crates/iii-worker/images/python` and
//! `images/node`) where the host allows.
//!
//! - A plain `python3 -m pip install` works in the python image, as in
//!   `python:3.12-slim`, which has no PEP 668 marker: the host's
//!   `EXTERNALLY-MANAGED` files are hidden (whited out) in the image's
//!   layer, never touched on the host. What pip installs lands in the
//!   image's shared `/usr`, seen by every sandbox of the image, as on the
//!   daemon. (`npm install -g` needs nothing: it writes under `/usr` too.)
//! - The images' home directories exist (`/home/python-user/work`,
//!   `/home/node/work`).
//!
//! What an exec sees otherwise follows the daemon, not the Dockerfiles: it
//! runs as root in `/`, with the create env and a default `PATH` only (the
//! daemon boots a sandbox from the image's rootfs without its `USER`,
//! `WORKDIR` or `ENV`). docs/sandbox.md lists what still differs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::image_layer::ImageLayer;

/// The home directory each preset image's Dockerfile creates.
fn home_of(image: &str) -> Option<&'static str> {
    match image {
        "python" => Some("python-user"),
        "node" => Some("node"),
        _ => None,
    }
}

/// Lays `image`'s preset contents into its fresh shared layer.
pub(crate) fn apply(image: &str, layer: &ImageLayer) -> std::io::Result<()> {
    if let (Some(user), Some(home)) = (home_of(image), layer.dir("home")) {
        let work = home.upper.join(user).join("work");
        std::fs::create_dir_all(&work)?;
        for dir in [home.upper.join(user), work] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    if image == "python" {
        allow_pip(layer)?;
    }
    Ok(())
}

/// Hides every `/usr/lib/python3.*/EXTERNALLY-MANAGED` of the host from
/// the image: a whiteout in the layer's `/usr`, its parents created with
/// the host's modes. Where the kernel refuses an unprivileged whiteout, a
/// pip configuration in the image's `/etc` has the same effect on pip.
fn allow_pip(layer: &ImageLayer) -> std::io::Result<()> {
    let Some(usr) = layer.dir("usr") else {
        return Ok(());
    };
    let Ok(entries) = std::fs::read_dir("/usr/lib") else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with("python3")) else {
            continue;
        };
        if !entry.path().join("EXTERNALLY-MANAGED").is_file() {
            continue;
        }
        let upper = usr.upper.join("lib").join(name);
        for (dir, like) in [
            (usr.upper.join("lib"), Path::new("/usr/lib").to_path_buf()),
            (upper.clone(), entry.path()),
        ] {
            if !dir.is_dir() {
                std::fs::create_dir(&dir)?;
                let mode = std::fs::metadata(&like)?.permissions().mode() & 0o7777;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
            }
        }
        let whiteout = nix::sys::stat::mknod(
            &upper.join("EXTERNALLY-MANAGED"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        );
        if whiteout.is_err() {
            pip_config(layer)?;
        }
    }
    Ok(())
}

/// `/etc/pip.conf` in the image's layer (over the host's, if any): pip may
/// install into the system site-packages.
fn pip_config(layer: &ImageLayer) -> std::io::Result<()> {
    let Some(etc) = layer.dir("etc") else {
        return Ok(());
    };
    std::fs::write(
        etc.upper.join("pip.conf"),
        "[global]\nbreak-system-packages = true\n",
    )
}

#[cfg(test)]
mod tests {
    use super::super::image_layer::testing::TempLayer;
    use super::*;

    #[test]
    fn the_python_image_hides_the_pep_668_marker_and_has_its_home() {
        let t = TempLayer::new();
        apply("python", &t.0).expect("preset");
        assert!(t.0.lookup(Path::new("/home/python-user/work")).is_some());
        assert!(t.0.lookup(Path::new("/home/node")).is_none());
        for entry in std::fs::read_dir("/usr/lib")
            .expect("ls /usr/lib")
            .flatten()
        {
            let marker = entry.path().join("EXTERNALLY-MANAGED");
            if marker.is_file() {
                let guest = Path::new("/usr/lib")
                    .join(entry.file_name())
                    .join("EXTERNALLY-MANAGED");
                let pip_conf = t.0.lookup(Path::new("/etc/pip.conf"));
                assert!(
                    t.0.lookup(&guest).is_none() || pip_conf.is_some(),
                    "{} still shows in the image",
                    guest.display()
                );
                assert!(marker.is_file(), "the host's marker is untouched");
                assert!(t.0.lookup(&entry.path()).is_some(), "its directory stays");
            }
        }
    }

    #[test]
    fn the_node_image_has_its_home_and_keeps_debians_python_as_it_is() {
        let t = TempLayer::new();
        apply("node", &t.0).expect("preset");
        assert!(t.0.lookup(Path::new("/home/node/work")).is_some());
        // node:24-slim's python3 is Debian's, marker included.
        for entry in std::fs::read_dir("/usr/lib")
            .expect("ls /usr/lib")
            .flatten()
        {
            let marker = entry.path().join("EXTERNALLY-MANAGED");
            if marker.is_file() {
                assert!(t.0.lookup(&marker).is_some(), "{}", marker.display());
            }
        }
    }
}
