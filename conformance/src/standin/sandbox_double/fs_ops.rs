//! `sandbox::fs::write`, `fs::read` and `fs::mkdir`, done host-side on the
//! sandbox's scratch directory with strict confinement.
//!
//! Paths must be absolute guest paths. They are resolved as the guest sees
//! them (`guest_path`), and scratch files are then opened with
//! `openat2(RESOLVE_IN_ROOT)` on the scratch root, so neither `..` nor a
//! symlink planted by a guest (even one swapped in concurrently) can reach a
//! host file. Paths in the image rootfs (`/usr`, `/etc`, `/opt`...) are read
//! through the merged layers and written into the image's shared upper
//! layer, copying directories up from the host's lower ones as overlayfs
//! would; upper entries are opened with `RESOLVE_NO_SYMLINKS` beneath the
//! layer, so a guest's symlink can never redirect a write to the host.
//! Error codes and messages follow the in-VM supervisor:
//! S210 bad mode, S211 missing (with `fix:{"parents":true}` when a write's
//! parent is missing), S212 wrong type, S213 exists, S215 permission, S216
//! other I/O.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use iii_sdk::channel::StreamChannelRef;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::daemon::{parse_id, wait_for_boot, Daemon};
use super::error::{from_io, DaemonError};
use super::guest_path::{split_parent, GuestView, Region, ResolveError, Resolved};
use super::image_layer::{is_opaque, mark_opaque, Found, ImageLayer};

/// Files under this size come back inline as `body`.
pub const INLINE_CAP: usize = 1024 * 1024;

// ---------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------

/// File body of `fs::write`: a UTF-8 string, or a data-channel reader ref.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum WriteContent {
    /// Inline UTF-8 text, written verbatim.
    Utf8(String),
    /// A data channel to stream from (not available on this double).
    Stream(StreamChannelRef),
}

/// `sandbox::fs::write` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct WriteRequest {
    /// UUID returned by `sandbox::create`.
    pub sandbox_id: String,
    /// Absolute guest path.
    pub path: String,
    /// Octal permissions of the file (default `0644`).
    #[serde(default = "file_mode")]
    pub mode: String,
    /// Create missing parent directories.
    #[serde(default)]
    pub parents: bool,
    /// File body; exactly one of `content` and `content_b64`.
    #[serde(default)]
    pub content: Option<WriteContent>,
    /// Base64 file body.
    #[serde(default)]
    pub content_b64: Option<String>,
}

fn file_mode() -> String {
    "0644".to_string()
}

fn dir_mode() -> String {
    "0755".to_string()
}

/// `sandbox::fs::write` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub struct WriteResponse {
    pub bytes_written: u64,
    pub path: String,
}

/// `sandbox::fs::read` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ReadRequest {
    /// UUID returned by `sandbox::create`.
    pub sandbox_id: String,
    /// Absolute guest path.
    pub path: String,
}

/// `sandbox::fs::read` response. `content` is the daemon's data-channel
/// ref; this double has no channels, so it is always null and `body`
/// carries UTF-8 files under 1 MiB.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReadResponse {
    pub content: Option<StreamChannelRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    pub size: u64,
    pub mode: String,
    pub mtime: i64,
}

/// `sandbox::fs::mkdir` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct MkdirRequest {
    /// UUID returned by `sandbox::create`.
    pub sandbox_id: String,
    /// Absolute guest path.
    pub path: String,
    /// Octal permissions of the new directory (default `0755`).
    #[serde(default = "dir_mode")]
    pub mode: String,
    /// Create missing parents like `mkdir -p` (an existing path is then ok).
    #[serde(default)]
    pub parents: bool,
}

/// `sandbox::fs::mkdir` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub struct MkdirResponse {
    pub created: bool,
}

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

/// Handles `sandbox::fs::write`: body checks, then S001/S002/S004, then
/// the write.
pub async fn handle_write(d: &Daemon, req: WriteRequest) -> Result<WriteResponse, DaemonError> {
    let bytes = match (req.content, req.content_b64) {
        (Some(WriteContent::Utf8(s)), None) => s.into_bytes(),
        (Some(WriteContent::Stream(_)), None) => {
            return Err(DaemonError::FsIo(
                "channel read: data channels are not available on the iii-sandbox double; send `content` as a string or use `content_b64`".to_string(),
            ))
        }
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| {
                DaemonError::InvalidRequest(format!("content_b64 is not valid base64: {e}"))
            })?,
        (Some(_), Some(_)) => {
            return Err(DaemonError::InvalidRequest(
                "set either `content` (string or StreamChannelRef) or `content_b64`, not both"
                    .into(),
            ))
        }
        (None, None) => {
            return Err(DaemonError::InvalidRequest(
                "missing file body: set `content` (string or StreamChannelRef) or `content_b64`"
                    .into(),
            ))
        }
    };
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let (path, mode, parents) = (req.path, req.mode, req.parents);
    let scratch = guest.scratch.clone();
    blocking(move || write_file(scratch.view(), &path, &mode, parents, &bytes)).await
}

/// Handles `sandbox::fs::read`.
pub async fn handle_read(d: &Daemon, req: ReadRequest) -> Result<ReadResponse, DaemonError> {
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let scratch = guest.scratch.clone();
    blocking(move || read_file(scratch.view(), &req.path)).await
}

/// Handles `sandbox::fs::mkdir`.
pub async fn handle_mkdir(d: &Daemon, req: MkdirRequest) -> Result<MkdirResponse, DaemonError> {
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let scratch = guest.scratch.clone();
    blocking(move || make_dir(scratch.view(), &req.path, &req.mode, req.parents)).await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DaemonError> + Send + 'static,
) -> Result<T, DaemonError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DaemonError::FsIo(format!("fs worker: {e}")))?
}

// ---------------------------------------------------------------------------
// Operations on a guest view (synchronous; unit-testable without an engine)
// ---------------------------------------------------------------------------

/// Parses an octal mode such as `0755`; S210 otherwise.
pub fn parse_mode(mode: &str) -> Result<u32, DaemonError> {
    let digits = mode.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|bits| *bits <= 0o7777)
        .ok_or_else(|| DaemonError::FsInvalidRequest(format!("invalid octal mode: {mode}")))
}

fn os_err(code: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(code)
}

fn special(path: &str) -> DaemonError {
    DaemonError::FsPermission(format!(
        "{path}: /dev and /proc exist only inside an exec on the iii-sandbox double"
    ))
}

fn resolve(view: &GuestView, path: &str, original: &str) -> Result<Resolved, DaemonError> {
    view.resolve(path, true).map_err(|e| match e {
        ResolveError::Relative(_) | ResolveError::Nul => {
            DaemonError::FsInvalidRequest(format!("{e}: {original}"))
        }
        ResolveError::Loop => from_io(original, &os_err(libc::ELOOP)),
    })
}

fn require_absolute(path: &str) -> Result<(), DaemonError> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(DaemonError::FsInvalidRequest(format!(
            "path must be absolute: {path}"
        )))
    }
}

/// Opens the scratch root as a directory handle.
fn open_root(view: &GuestView) -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        view.root(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens an absolute guest path below the scratch root with the kernel
/// treating the root as `/`: no `..` or symlink can leave it.
fn open_in_root(root: &OwnedFd, guest: &Path, flags: OFlag, mode: u32) -> std::io::Result<OwnedFd> {
    let rel = guest.strip_prefix("/").unwrap_or(guest);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(root.as_raw_fd(), rel, how)?;
    // SAFETY: `openat2` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir(root: &OwnedFd, guest: &Path) -> std::io::Result<OwnedFd> {
    open_in_root(root, guest, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)
}

/// `mkdir -p` of an absolute guest directory, one component at a time
/// under the scratch root. Returns a handle on the final directory.
fn mkdir_all(root: &OwnedFd, guest: &Path) -> std::io::Result<OwnedFd> {
    let mut current = PathBuf::from("/");
    let mut dir = open_dir(root, &current)?;
    for comp in guest.components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        current.push(name);
        dir = match open_dir(root, &current) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match nix::sys::stat::mkdirat(
                    Some(dir.as_raw_fd()),
                    name,
                    Mode::from_bits_truncate(0o777),
                ) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                open_dir(root, &current)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(dir)
}

/// Writes `bytes` to `path` atomically (temp sibling, fsync, chmod,
/// rename), as the supervisor does.
pub fn write_file(
    view: &GuestView,
    path: &str,
    mode: &str,
    parents: bool,
    bytes: &[u8],
) -> Result<WriteResponse, DaemonError> {
    let bits = parse_mode(mode)?;
    require_absolute(path)?;
    let Some((parent_path, name)) = split_parent(path) else {
        return Err(from_io(path, &os_err(libc::EISDIR)));
    };
    let parent = resolve(view, &parent_path, path)?;
    let io = |e: std::io::Error| from_io(path, &e);
    let dir = match parent.region {
        Region::Special => return Err(special(path)),
        Region::Image => {
            let target = parent.guest.join(&name);
            if let Some(found) = view.layer().lookup(&target) {
                if std::fs::symlink_metadata(found.path()).is_ok_and(|m| m.is_dir()) {
                    return Err(io(os_err(libc::EISDIR)));
                }
            }
            upper_dir(view.layer(), &parent.guest, parents)
        }
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            if parents {
                mkdir_all(&root, &parent.guest)
            } else {
                open_dir(&root, &parent.guest)
            }
        }
    };
    let dir = match dir {
        Ok(fd) => fd,
        Err(e) if !parents && e.kind() == std::io::ErrorKind::NotFound => {
            return Err(DaemonError::FsParentNotFound(format!(
                "parent not found: {parent_path}"
            )))
        }
        Err(e) => return Err(io(e)),
    };
    write_atomically(&dir, &name, bits, bytes).map_err(io)?;
    Ok(WriteResponse {
        bytes_written: bytes.len() as u64,
        path: path.to_string(),
    })
}

fn write_atomically(dir: &OwnedFd, name: &OsStr, bits: u32, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = name.to_os_string();
    tmp.push(format!(".iii-tmp-{}", uuid::Uuid::new_v4()));
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        tmp.as_os_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    // SAFETY: `openat` just returned this descriptor and nothing else owns it.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        nix::sys::stat::fchmod(file.as_raw_fd(), Mode::from_bits_truncate(bits))?;
        nix::fcntl::renameat(
            Some(dir.as_raw_fd()),
            tmp.as_os_str(),
            Some(dir.as_raw_fd()),
            name,
        )?;
        Ok(())
    })();
    if result.is_err() {
        let _ = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    result
}

/// Reads `path`: metadata always, the body inline when it is valid UTF-8
/// and under 1 MiB.
pub fn read_file(view: &GuestView, path: &str) -> Result<ReadResponse, DaemonError> {
    require_absolute(path)?;
    let target = resolve(view, path, path)?;
    let io = |e: std::io::Error| from_io(path, &e);
    let file = match target.region {
        Region::Special => return Err(special(path)),
        // O_NONBLOCK: a FIFO must not hang the call.
        Region::Image => match view.layer().lookup(&target.guest) {
            None => return Err(io(os_err(libc::ENOENT))),
            // The host's own directories: no guest can change them.
            Some(Found::Lower(p)) => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(p)
                .map_err(io)?,
            Some(Found::Upper(_)) => std::fs::File::from(
                open_upper(
                    view.layer(),
                    &target.guest,
                    OFlag::O_RDONLY | OFlag::O_NONBLOCK,
                )
                .map_err(io)?,
            ),
        },
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            let fd = open_in_root(&root, &target.guest, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0)
                .map_err(io)?;
            std::fs::File::from(fd)
        }
    };
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(DaemonError::FsWrongType(format!("is a directory: {path}")));
    }
    if !meta.is_file() {
        return Err(DaemonError::FsIo(format!("{path}: not a regular file")));
    }
    let size = meta.len();
    let mut body = None;
    if (size as usize) < INLINE_CAP {
        let mut buf = Vec::with_capacity(size as usize);
        file.take(INLINE_CAP as u64)
            .read_to_end(&mut buf)
            .map_err(|e| DaemonError::FsIo(format!("read buffer: {e}")))?;
        if buf.len() < INLINE_CAP {
            body = String::from_utf8(buf).ok();
        }
    }
    Ok(ReadResponse {
        content: None,
        body,
        size,
        mode: format!("{:04o}", meta.mode() & 0o7777),
        mtime: meta.mtime(),
    })
}

/// Creates a directory; with `parents`, like `mkdir -p` (an existing path
/// answers `created:false`).
pub fn make_dir(
    view: &GuestView,
    path: &str,
    mode: &str,
    parents: bool,
) -> Result<MkdirResponse, DaemonError> {
    let bits = parse_mode(mode)?;
    require_absolute(path)?;
    let target = resolve(view, path, path)?;
    let io = |e: std::io::Error| from_io(path, &e);
    let exists = match target.region {
        Region::Special => return Err(special(path)),
        Region::Image => view.layer().lookup(&target.guest).is_some(),
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            open_in_root(&root, &target.guest, OFlag::O_PATH, 0).is_ok()
        }
    };
    if exists {
        if parents {
            return Ok(MkdirResponse { created: false });
        }
        return Err(DaemonError::FsAlreadyExists(format!(
            "path already exists: {path}"
        )));
    }
    let Some((parent_path, name)) = split_parent(path) else {
        return Err(io(os_err(libc::EEXIST)));
    };
    let parent = resolve(view, &parent_path, path)?;
    let mut opaque = false;
    let dir = match parent.region {
        Region::Special => return Err(special(path)),
        Region::Image => {
            let dir = upper_dir(view.layer(), &parent.guest, parents).map_err(io)?;
            // Recreating a directory the guest deleted: drop the whiteout
            // and hide the deleted lower directory's children.
            if is_whiteout_at(&dir, &name) {
                nix::unistd::unlinkat(
                    Some(dir.as_raw_fd()),
                    name.as_os_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                )
                .map_err(|e| io(e.into()))?;
                opaque = true;
            }
            dir
        }
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            if parents {
                mkdir_all(&root, &parent.guest).map_err(io)?
            } else {
                open_dir(&root, &parent.guest).map_err(io)?
            }
        }
    };
    nix::sys::stat::mkdirat(
        Some(dir.as_raw_fd()),
        name.as_os_str(),
        Mode::from_bits_truncate(0o777),
    )
    .map_err(|e| io(e.into()))?;
    let created = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name.as_os_str(),
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    // SAFETY: `openat` just returned this descriptor and nothing else owns it.
    let created = unsafe { OwnedFd::from_raw_fd(created) };
    nix::sys::stat::fchmod(created.as_raw_fd(), Mode::from_bits_truncate(bits))
        .map_err(|e| io(e.into()))?;
    if opaque {
        mark_opaque(&created).map_err(io)?;
    }
    Ok(MkdirResponse { created: true })
}

// ---------------------------------------------------------------------------
// The image rootfs: merged reads, writes into the shared upper layer
// ---------------------------------------------------------------------------

/// Opens an existing entry of the upper layer beneath its top-level
/// directory, refusing every symlink (the path is already resolved, so a
/// symlink here was swapped in by a guest).
fn open_upper(layer: &ImageLayer, guest: &Path, flags: OFlag) -> std::io::Result<OwnedFd> {
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

fn open_path_dir(p: &Path) -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        p,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the child directory `name` of `dir`, never through a symlink.
fn open_child_dir(dir: &OwnedFd, name: &OsStr, flags: OFlag) -> std::io::Result<OwnedFd> {
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
fn is_whiteout_at(dir: &OwnedFd, name: &OsStr) -> bool {
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
fn upper_dir(layer: &ImageLayer, guest: &Path, create_missing: bool) -> std::io::Result<OwnedFd> {
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
fn make_child(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::sandbox_double::error::SCode;
    use crate::standin::sandbox_double::image_layer::testing::TempLayer;
    use crate::standin::sandbox_double::isolation::{HostLayout, Scratch};
    use rstest::rstest;

    struct Fixture {
        scratch: Scratch,
        layer: TempLayer,
    }

    impl Fixture {
        fn new() -> Fixture {
            let layout = HostLayout::detect().expect("layout");
            let layer = TempLayer::new();
            Fixture {
                scratch: Scratch::create(&layout, layer.0.clone(), uuid::Uuid::new_v4())
                    .expect("scratch"),
                layer,
            }
        }
        /// A second sandbox of the same image.
        fn sibling(&self) -> Scratch {
            let layout = HostLayout::detect().expect("layout");
            Scratch::create(&layout, self.layer.0.clone(), uuid::Uuid::new_v4()).expect("scratch")
        }
        fn view(&self) -> &GuestView {
            self.scratch.view()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = self.scratch.remove();
        }
    }

    fn code<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> (SCode, String) {
        let e = r.expect_err("expected an error");
        (e.code(), e.to_string())
    }

    #[test]
    fn write_then_read_roundtrip() {
        let f = Fixture::new();
        let w = write_file(f.view(), "/tmp/a.txt", "0600", false, b"hello").expect("write");
        assert_eq!(
            w,
            WriteResponse {
                bytes_written: 5,
                path: "/tmp/a.txt".into()
            }
        );
        assert!(f.scratch.path().join("tmp/a.txt").is_file());
        let r = read_file(f.view(), "/tmp/a.txt").expect("read");
        assert_eq!(r.body.as_deref(), Some("hello"));
        assert_eq!((r.size, r.mode.as_str()), (5, "0600"));
        assert!(r.content.is_none());
    }

    #[test]
    fn missing_parent_is_s211_with_parents_fix() {
        let f = Fixture::new();
        let e = write_file(f.view(), "/work/x/main.py", "0644", false, b"x").expect_err("S211");
        assert_eq!(e.code(), SCode::S211);
        assert_eq!(
            e.to_string(),
            "parent directory not found: parent not found: /work/x"
        );
        assert_eq!(e.payload()["fix"], serde_json::json!({"parents": true}));
        let ok = write_file(f.view(), "/work/x/main.py", "0644", true, b"x");
        assert!(ok.is_ok());
        assert!(f.scratch.path().join("work/x/main.py").is_file());
    }

    #[test]
    fn symlink_escapes_stay_inside_the_sandbox() {
        let f = Fixture::new();
        let outside = std::env::temp_dir().join(format!("escape-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&outside).expect("outside dir");
        // A guest-planted absolute link to a host path.
        std::os::unix::fs::symlink(&outside, f.scratch.path().join("tmp/link")).expect("ln");
        let r = write_file(f.view(), "/tmp/link/pwned", "0644", true, b"x");
        assert!(r.is_ok(), "{r:?}");
        assert!(!outside.join("pwned").exists(), "wrote through to the host");
        // The link is interpreted in the guest: <scratch>/<outside path>.
        let inside = f
            .scratch
            .path()
            .join(outside.strip_prefix("/").expect("abs"))
            .join("pwned");
        assert!(inside.is_file());
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn dotdot_cannot_climb_out() {
        let f = Fixture::new();
        let r = write_file(f.view(), "/../../../tmp/dots", "0644", false, b"x");
        assert!(r.is_ok());
        assert!(f.scratch.path().join("tmp/dots").is_file());
    }

    #[rstest]
    #[case("/usr/local/lib/scr-test/planted.py")]
    #[case("/etc/scr-test/planted.conf")]
    #[case("/opt/sdk/planted.js")]
    #[case("/root/.cache/planted")]
    fn image_rootfs_writes_are_shared_and_spare_the_host(#[case] path: &str) {
        let f = Fixture::new();
        let (c, _) = code(write_file(f.view(), path, "0644", false, b"x"));
        assert_eq!(c, SCode::S211, "parent missing without `parents`");
        write_file(f.view(), path, "0640", true, b"planted").expect("write with parents");
        assert!(!Path::new(path).exists(), "reached the host: {path}");
        let other = f.sibling();
        let r = read_file(other.view(), path).expect("a sibling sandbox reads it");
        assert_eq!(
            (r.body.as_deref(), r.mode.as_str()),
            (Some("planted"), "0640")
        );
        let _ = other.remove();
        let fresh = Fixture::new();
        assert_eq!(
            code(read_file(fresh.view(), path)).0,
            SCode::S211,
            "another image"
        );
    }

    #[test]
    fn copied_up_directories_keep_the_host_mode() {
        let f = Fixture::new();
        write_file(f.view(), "/usr/share/scr-test-file", "0644", false, b"x").expect("write");
        let usr = &f.layer.0.dir("usr").expect("usr").upper;
        let host = std::fs::metadata("/usr/share").expect("host /usr/share");
        let up = std::fs::metadata(usr.join("share")).expect("copied up");
        assert_eq!(up.mode() & 0o7777, host.mode() & 0o7777);
        // Host files stay readable through the merged view.
        let r = read_file(f.view(), "/etc/passwd").expect("lower file");
        assert!(r.body.is_some());
        assert!(!Path::new("/usr/share/scr-test-file").exists());
    }

    #[test]
    fn mkdir_in_the_image_rootfs() {
        let f = Fixture::new();
        assert_eq!(
            make_dir(f.view(), "/usr/share", "0755", false).map_err(|e| e.code()),
            Err(SCode::S213)
        );
        assert_eq!(
            make_dir(f.view(), "/opt/a/b", "0700", true),
            Ok(MkdirResponse { created: true })
        );
        let other = f.sibling();
        assert_eq!(
            make_dir(other.view(), "/opt/a/b", "0755", true),
            Ok(MkdirResponse { created: false })
        );
        let _ = other.remove();
    }

    #[test]
    fn upper_symlinks_are_never_followed_to_the_host() {
        let f = Fixture::new();
        let outside = std::env::temp_dir().join(format!("escape-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&outside).expect("outside dir");
        // A guest plants an absolute link in the shared layer.
        let opt = &f.layer.0.dir("opt").expect("opt").upper;
        std::os::unix::fs::symlink(&outside, opt.join("link")).expect("ln");
        let r = write_file(f.view(), "/opt/link/pwned", "0644", true, b"x");
        assert!(r.is_ok(), "{r:?}");
        assert!(!outside.join("pwned").exists(), "wrote through to the host");
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[rstest]
    #[case("tmp/rel", SCode::S210)]
    #[case("/tmp/missing", SCode::S211)]
    #[case("/tmp", SCode::S212)]
    #[case("/proc/self/environ", SCode::S215)]
    fn read_errors(#[case] path: &str, #[case] want: SCode) {
        let f = Fixture::new();
        assert_eq!(code(read_file(f.view(), path)).0, want);
    }

    #[test]
    fn read_messages_follow_the_supervisor() {
        let f = Fixture::new();
        assert_eq!(
            code(read_file(f.view(), "/tmp/missing")).1,
            "file not found: path not found: /tmp/missing"
        );
        assert_eq!(
            code(read_file(f.view(), "/tmp")).1,
            "not a directory or wrong type: is a directory: /tmp"
        );
    }

    #[test]
    fn large_or_binary_files_have_no_body() {
        let f = Fixture::new();
        let big = vec![b'a'; INLINE_CAP];
        assert!(write_file(f.view(), "/tmp/big", "0644", false, &big).is_ok());
        let r = read_file(f.view(), "/tmp/big").expect("read");
        assert_eq!((r.size, r.body), (INLINE_CAP as u64, None));
        assert!(write_file(f.view(), "/tmp/bin", "0644", false, &[0xff, 0xfe]).is_ok());
        assert_eq!(read_file(f.view(), "/tmp/bin").expect("read").body, None);
    }

    #[test]
    fn mkdir_semantics() {
        let f = Fixture::new();
        assert_eq!(
            make_dir(f.view(), "/newdir", "0700", false),
            Ok(MkdirResponse { created: true })
        );
        let meta = std::fs::metadata(f.scratch.path().join("newdir")).expect("dir");
        assert_eq!(meta.mode() & 0o7777, 0o700);
        assert_eq!(
            code(make_dir(f.view(), "/newdir", "0755", false)),
            (
                SCode::S213,
                "already exists: path already exists: /newdir".into()
            )
        );
        assert_eq!(
            make_dir(f.view(), "/newdir", "0755", true),
            Ok(MkdirResponse { created: false })
        );
        assert_eq!(
            code(make_dir(f.view(), "/a/b/c", "0755", false)),
            (SCode::S211, "file not found: path not found: /a/b/c".into())
        );
        assert_eq!(
            make_dir(f.view(), "/a/b/c", "0755", true),
            Ok(MkdirResponse { created: true })
        );
        assert!(f.scratch.path().join("a/b/c").is_dir());
    }

    #[rstest]
    #[case("0644", Some(0o644))]
    #[case("755", Some(0o755))]
    #[case("0", Some(0))]
    #[case("0x9", None)]
    #[case("0999", None)]
    fn modes(#[case] mode: &str, #[case] want: Option<u32>) {
        assert_eq!(parse_mode(mode).ok(), want);
    }

    #[test]
    fn bad_mode_message() {
        let f = Fixture::new();
        assert_eq!(
            code(write_file(f.view(), "/tmp/x", "rwx", false, b"")),
            (SCode::S210, "invalid octal mode: rwx".into())
        );
    }
}
