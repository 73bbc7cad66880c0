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
//! other I/O, S218 a stalled data channel.
//!
//! Data channels ([`channel`]): `fs::write` takes its body from a reader ref
//! as well as inline, and `fs::read` always answers one in `content`.

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

mod channel;
mod image_rootfs;
use image_rootfs::*;

/// Files under this size come back inline as `body`.
pub(crate) const INLINE_CAP: usize = 1024 * 1024;

// ---------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------

/// File body of `fs::write`: a UTF-8 string, or a data-channel reader ref.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum WriteContent {
    /// Inline UTF-8 text, written verbatim.
    Utf8(String),
    /// A data channel (its reader ref) to read the body from.
    Stream(StreamChannelRef),
}

/// `sandbox::fs::write` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct WriteRequest {
    /// UUID returned by `sandbox::create`.
    pub(crate) sandbox_id: String,
    /// Absolute guest path.
    pub(crate) path: String,
    /// Octal permissions of the file (default `0644`).
    #[serde(default = "file_mode")]
    pub(crate) mode: String,
    /// Create missing parent directories.
    #[serde(default)]
    pub(crate) parents: bool,
    /// File body; exactly one of `content` and `content_b64`.
    #[serde(default)]
    pub(crate) content: Option<WriteContent>,
    /// Base64 file body.
    #[serde(default)]
    pub(crate) content_b64: Option<String>,
}

fn file_mode() -> String {
    "0644".to_string()
}

fn dir_mode() -> String {
    "0755".to_string()
}

/// `sandbox::fs::write` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct WriteResponse {
    pub(crate) bytes_written: u64,
    pub(crate) path: String,
}

/// `sandbox::fs::read` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct ReadRequest {
    /// UUID returned by `sandbox::create`.
    pub(crate) sandbox_id: String,
    /// Absolute guest path.
    pub(crate) path: String,
}

/// `sandbox::fs::read` response. `content` is the reader ref of a data
/// channel carrying the whole file (null only without an engine link, in
/// unit tests); `body` carries UTF-8 files under 1 MiB as well.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ReadResponse {
    pub(crate) content: Option<StreamChannelRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<String>,
    pub(crate) size: u64,
    pub(crate) mode: String,
    pub(crate) mtime: i64,
}

/// `sandbox::fs::mkdir` request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub(crate) struct MkdirRequest {
    /// UUID returned by `sandbox::create`.
    pub(crate) sandbox_id: String,
    /// Absolute guest path.
    pub(crate) path: String,
    /// Octal permissions of the new directory (default `0755`).
    #[serde(default = "dir_mode")]
    pub(crate) mode: String,
    /// Create missing parents like `mkdir -p` (an existing path is then ok).
    #[serde(default)]
    pub(crate) parents: bool,
}

/// `sandbox::fs::mkdir` response.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct MkdirResponse {
    pub(crate) created: bool,
}

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

/// S001 of an `fs::write` with both bodies.
const TWO_BODIES: &str =
    "set either `content` (string or StreamChannelRef) or `content_b64`, not both";
/// S001 of an `fs::write` without a body.
const NO_BODY: &str =
    "missing file body: set `content` (string or StreamChannelRef) or `content_b64`";

/// Handles `sandbox::fs::write`: body checks, then S001/S002/S004, then
/// the write.
pub(crate) async fn handle_write(
    d: &Daemon,
    req: WriteRequest,
) -> Result<WriteResponse, DaemonError> {
    // `Err` holds a channel to read the body from.
    let body = match (req.content, req.content_b64) {
        (Some(WriteContent::Utf8(s)), None) => Ok(s.into_bytes()),
        (Some(WriteContent::Stream(r)), None) => Err(r),
        (None, Some(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| {
                    DaemonError::InvalidRequest(format!("content_b64 is not valid base64: {e}"))
                })?;
            Ok(bytes)
        }
        (Some(_), Some(_)) => return Err(DaemonError::InvalidRequest(TWO_BODIES.into())),
        (None, None) => return Err(DaemonError::InvalidRequest(NO_BODY.into())),
    };
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    // A channel is read whole first; the daemon streams it into the guest,
    // whose checks (mode, parent) answer only once the stream has ended.
    let bytes = match body {
        Ok(bytes) => bytes,
        Err(r) => {
            let engine = d.engine().ok_or_else(|| {
                DaemonError::FsIo("channel read: the double has no engine link".to_string())
            })?;
            channel::read_body(engine.address(), &r).await?
        }
    };
    let (path, mode, parents) = (req.path, req.mode, req.parents);
    let scratch = guest.scratch.clone();
    blocking(move || write_file(scratch.view(), &path, &mode, parents, &bytes)).await
}

/// Handles `sandbox::fs::read`.
pub(crate) async fn handle_read(d: &Daemon, req: ReadRequest) -> Result<ReadResponse, DaemonError> {
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let scratch = guest.scratch.clone();
    let (mut resp, file) = blocking(move || open_file(scratch.view(), &req.path)).await?;
    if let Some(engine) = d.engine() {
        resp.content = Some(channel::serve_file(&engine, file).await?);
    }
    Ok(resp)
}

/// Handles `sandbox::fs::mkdir`.
pub(crate) async fn handle_mkdir(
    d: &Daemon,
    req: MkdirRequest,
) -> Result<MkdirResponse, DaemonError> {
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
pub(crate) fn parse_mode(mode: &str) -> Result<u32, DaemonError> {
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
pub(crate) fn write_file(
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
            if view.read_only(&parent.guest) {
                return Err(io(os_err(libc::EROFS)));
            }
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

/// [`open_file`] without the file.
#[cfg(test)]
pub(crate) fn read_file(view: &GuestView, path: &str) -> Result<ReadResponse, DaemonError> {
    open_file(view, path).map(|(resp, _)| resp)
}

/// Reads `path`: metadata always, the body inline when it is valid UTF-8
/// and under 1 MiB; and the open file, for the data channel.
fn open_file(view: &GuestView, path: &str) -> Result<(ReadResponse, std::fs::File), DaemonError> {
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
        (&file)
            .take(INLINE_CAP as u64)
            .read_to_end(&mut buf)
            .map_err(|e| DaemonError::FsIo(format!("read buffer: {e}")))?;
        if buf.len() < INLINE_CAP {
            body = String::from_utf8(buf).ok();
        }
    }
    let resp = ReadResponse {
        content: None,
        body,
        size,
        mode: format!("{:04o}", meta.mode() & 0o7777),
        mtime: meta.mtime(),
    };
    Ok((resp, file))
}

/// Creates a directory; with `parents`, like `mkdir -p` (an existing path
/// answers `created:false`).
pub(crate) fn make_dir(
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
            if view.read_only(&parent.guest) {
                return Err(io(os_err(libc::EROFS)));
            }
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

#[cfg(test)]
mod tests;
