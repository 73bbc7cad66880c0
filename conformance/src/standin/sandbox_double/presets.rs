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
//! - The images' users exist: `python-user` (uid 1000, gid 100, `users`)
//!   and `node` (uid 1000, gid 1000), in `/etc/passwd` and `/etc/group` (the
//!   host's, with these entries in place of any other uid 1000), and own
//!   their home directories (`/home/python-user/work`, `/home/node/work`)
//!   where the double maps guest users (`users`); like everything in the
//!   image, those homes are shared by every sandbox of the image.
//!
//! What an exec sees otherwise follows the daemon, not the Dockerfiles: it
//! runs as root in `/`, with the create env and a default `PATH` only (the
//! daemon boots a sandbox from the image's rootfs without its `USER`,
//! `WORKDIR` or `ENV`). docs/sandbox.md lists what still differs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::image_layer::ImageLayer;
use super::users::Mapping;

/// The user a preset image's Dockerfile creates.
struct ImageUser {
    name: &'static str,
    uid: u32,
    gid: u32,
    /// Its primary group, when the Dockerfile creates one (python's is
    /// Debian's `users`).
    group: &'static str,
}

fn user_of(image: &str) -> Option<ImageUser> {
    match image {
        // useradd -m -s /bin/bash -N -u 1000 python-user (group 100)
        "python" => Some(ImageUser {
            name: "python-user",
            uid: 1000,
            gid: 100,
            group: "users",
        }),
        // node:24-slim's node user
        "node" => Some(ImageUser {
            name: "node",
            uid: 1000,
            gid: 1000,
            group: "node",
        }),
        _ => None,
    }
}

/// Lays `image`'s preset contents into its fresh shared layer; `mapping`
/// says whether files can belong to a guest user.
pub(crate) fn apply(image: &str, layer: &ImageLayer, mapping: Mapping) -> std::io::Result<()> {
    if let Some(user) = user_of(image) {
        add_user(layer, &user, mapping)?;
    }
    if image == "python" {
        allow_pip(layer)?;
    }
    Ok(())
}

/// The user's `/etc/passwd` and `/etc/group` entries and its home, owned by
/// it where the double maps guest users.
fn add_user(layer: &ImageLayer, user: &ImageUser, mapping: Mapping) -> std::io::Result<()> {
    if let Some(home) = layer.dir("home") {
        let dir = home.upper.join(user.name);
        let work = dir.join("work");
        std::fs::create_dir_all(&work)?;
        for d in [&dir, &work] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
            if let (Some(uid), Some(gid)) = (mapping.host_id(user.uid), mapping.host_id(user.gid)) {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))?;
            }
        }
    }
    let Some(etc) = layer.dir("etc") else {
        return Ok(());
    };
    let entry = format!(
        "{}:x:{}:{}::/home/{}:/bin/bash",
        user.name, user.uid, user.gid, user.name
    );
    let group = format!("{}:x:{}:", user.group, user.gid);
    for (file, line, name, id, id_field) in [
        ("passwd", entry, user.name, user.uid, 2),
        ("group", group, user.group, user.gid, 2),
    ] {
        let host = std::fs::read_to_string(Path::new("/etc").join(file)).unwrap_or_default();
        let mut text: String = host
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split(':').collect();
                f.first() != Some(&name) && f.get(id_field) != Some(&id.to_string().as_str())
            })
            .map(|l| format!("{l}\n"))
            .collect();
        text.push_str(&line);
        text.push('\n');
        let path = etc.upper.join(file);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
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
        apply("python", &t.0, Mapping::Single).expect("preset");
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
        apply("node", &t.0, Mapping::Single).expect("preset");
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

    #[test]
    fn the_images_users_are_in_passwd_and_own_their_homes_where_ids_map() {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let mapping = if root {
            Mapping::Range
        } else {
            Mapping::Single
        };
        for (image, line, group) in [
            (
                "python",
                "python-user:x:1000:100::/home/python-user:/bin/bash",
                "users:x:100:",
            ),
            (
                "node",
                "node:x:1000:1000::/home/node:/bin/bash",
                "node:x:1000:",
            ),
        ] {
            let t = TempLayer::new();
            apply(image, &t.0, mapping).expect("preset");
            let etc = &t.0.dir("etc").expect("etc").upper;
            let passwd = std::fs::read_to_string(etc.join("passwd")).expect("passwd");
            let uid_1000: Vec<&str> = passwd
                .lines()
                .filter(|l| l.split(':').nth(2) == Some("1000"))
                .collect();
            assert_eq!(uid_1000, [line], "{image}");
            assert!(
                passwd.lines().any(|l| l.starts_with("root:x:0:0:")),
                "{image}"
            );
            let groups = std::fs::read_to_string(etc.join("group")).expect("group");
            assert_eq!(groups.lines().filter(|l| *l == group).count(), 1, "{image}");
            let user = line.split(':').next().unwrap();
            let home = t.0.lookup(&Path::new("/home").join(user)).expect("home");
            let meta = std::fs::metadata(home.path()).expect("stat");
            if root {
                let gid: u32 = line.split(':').nth(3).unwrap().parse().unwrap();
                assert_eq!(meta.uid(), mapping.host_id(1000).unwrap(), "{image}");
                assert_eq!(meta.gid(), mapping.host_id(gid).unwrap(), "{image}");
            }
        }
    }
}
