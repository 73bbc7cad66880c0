//! The image rootfs: merged reads through the layers, writes into the
//! image's one shared upper layer (whiteouts and opaque directories).

use super::*;

/// Opens an existing entry of the upper layer beneath its top-level
/// directory, refusing every symlink (the path is already resolved, so a
/// symlink here was swapped in by a guest).
pub(super) fn open_upper(
    layer: &ImageLayer,
    guest: &Path,
    flags: OFlag,
) -> std::io::Result<OwnedFd> {
    let (dir, rel) = layer.split(guest).ok_or_else(|| os_err(libc::ENOENT))?;
    let top = open_path_dir(&dir.upper)?;
    let rel: PathBuf = rel.iter().collect();
    let rel = if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    };
    let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    let fd = nix::fcntl::openat2(top.as_raw_fd(), rel.as_path(), how)?;
    // SAFETY: `openat2` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn open_path_dir(p: &Path) -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        p,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the child directory `name` of `dir`, never through a symlink.
pub(super) fn open_child_dir(
    dir: &OwnedFd,
    name: &OsStr,
    flags: OFlag,
) -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        flags | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `openat` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `name` in `dir` is an overlayfs whiteout.
pub(super) fn is_whiteout_at(dir: &OwnedFd, name: &OsStr) -> bool {
    nix::sys::stat::fstatat(
        Some(dir.as_raw_fd()),
        name,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0)
}

/// Opens directory `guest` of the image rootfs in the shared upper layer,
/// first copying up (creating in upper with the host directory's mode and
/// owner) each component that so far exists only in the host's lower
/// directory, as overlayfs does. A missing component is created (0755,
/// opaque when it replaces a whiteout) when `create_missing`, and is
/// `NotFound` otherwise.
pub(super) fn upper_dir(
    layer: &ImageLayer,
    guest: &Path,
    create_missing: bool,
) -> std::io::Result<OwnedFd> {
    let (top, rel) = layer.split(guest).ok_or_else(|| os_err(libc::ENOENT))?;
    let mut dir = open_path_dir(&top.upper)?;
    let mut upper = top.upper.clone();
    let mut lower = top.lower.clone();
    for name in rel {
        upper.push(name);
        if let Some(l) = lower.as_mut() {
            l.push(name);
        }
        let st = nix::sys::stat::fstatat(
            Some(dir.as_raw_fd()),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
        match st {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                if is_opaque(&upper) {
                    lower = None;
                }
            }
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0 => {
                // A directory the guest deleted.
                if !create_missing {
                    return Err(os_err(libc::ENOENT));
                }
                nix::unistd::unlinkat(
                    Some(dir.as_raw_fd()),
                    name,
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )?;
                make_child(&dir, name, 0o755, None)?;
                let made = open_child_dir(&dir, name, OFlag::O_RDONLY)?;
                mark_opaque(&made)?;
                lower = None;
            }
            Ok(_) => return Err(os_err(libc::ENOTDIR)),
            Err(nix::errno::Errno::ENOENT) => match lower.as_ref().map(std::fs::symlink_metadata) {
                Some(Ok(m)) if m.is_dir() => {
                    make_child(&dir, name, m.mode() & 0o7777, Some((m.uid(), m.gid())))?;
                }
                Some(Ok(_)) => return Err(os_err(libc::ENOTDIR)),
                _ if create_missing => {
                    lower = None;
                    make_child(&dir, name, 0o755, None)?;
                }
                _ => return Err(os_err(libc::ENOENT)),
            },
            Err(e) => return Err(e.into()),
        }
        dir = open_child_dir(&dir, name, OFlag::O_PATH)?;
    }
    Ok(dir)
}

/// Creates directory `name` in `dir` with exactly `mode` (and `owner`, as
/// far as this process may chown). Losing a race to a concurrent creator
/// is fine.
pub(super) fn make_child(
    dir: &OwnedFd,
    name: &OsStr,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    match nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => {}
        Err(nix::errno::Errno::EEXIST) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let made = open_child_dir(dir, name, OFlag::O_RDONLY)?;
    if let Some((uid, gid)) = owner {
        let _ = nix::unistd::fchown(
            made.as_raw_fd(),
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        );
    }
    nix::sys::stat::fchmod(made.as_raw_fd(), Mode::from_bits_truncate(mode))?;
    Ok(())
}
