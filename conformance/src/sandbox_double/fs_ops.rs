//! `sandbox::fs::write`, `fs::read` and `fs::mkdir`, done host-side on the
//! sandbox's scratch directory with strict confinement.
//!
//! Paths must be absolute guest paths. They are resolved as the guest sees
//! them (`guest_path`), and scratch files are then opened with
//! `openat2(RESOLVE_IN_ROOT)` on the scratch root, so neither `..` nor a
//! symlink planted by a guest (even one swapped in concurrently) can reach a
//! host file. Paths under the read-only host binds are readable and answer
//! S215 on any write. Error codes and messages follow the in-VM supervisor:
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

use super::error::{from_io, SandboxError};
use super::guest_path::{split_parent, GuestView, Region, ResolveError, Resolved};
use super::lifecycle::{parse_id, wait_for_boot, Daemon};

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
pub async fn handle_write(d: &Daemon, req: WriteRequest) -> Result<WriteResponse, SandboxError> {
    let bytes = match (req.content, req.content_b64) {
        (Some(WriteContent::Utf8(s)), None) => s.into_bytes(),
        (Some(WriteContent::Stream(_)), None) => {
            return Err(SandboxError::FsIo(
                "channel read: data channels are not available on the iii-sandbox double; send `content` as a string or use `content_b64`".to_string(),
            ))
        }
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| {
                SandboxError::InvalidRequest(format!("content_b64 is not valid base64: {e}"))
            })?,
        (Some(_), Some(_)) => {
            return Err(SandboxError::InvalidRequest(
                "set either `content` (string or StreamChannelRef) or `content_b64`, not both"
                    .into(),
            ))
        }
        (None, None) => {
            return Err(SandboxError::InvalidRequest(
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
pub async fn handle_read(d: &Daemon, req: ReadRequest) -> Result<ReadResponse, SandboxError> {
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let scratch = guest.scratch.clone();
    blocking(move || read_file(scratch.view(), &req.path)).await
}

/// Handles `sandbox::fs::mkdir`.
pub async fn handle_mkdir(d: &Daemon, req: MkdirRequest) -> Result<MkdirResponse, SandboxError> {
    let id = parse_id(&req.sandbox_id)?;
    let guest = d.registry.touch(id)?;
    wait_for_boot(guest.ready_at).await;
    let scratch = guest.scratch.clone();
    blocking(move || make_dir(scratch.view(), &req.path, &req.mode, req.parents)).await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SandboxError::FsIo(format!("fs worker: {e}")))?
}

// ---------------------------------------------------------------------------
// Operations on a guest view (synchronous; unit-testable without an engine)
// ---------------------------------------------------------------------------

/// Parses an octal mode such as `0755`; S210 otherwise.
pub fn parse_mode(mode: &str) -> Result<u32, SandboxError> {
    let digits = mode.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|bits| *bits <= 0o7777)
        .ok_or_else(|| SandboxError::FsInvalidRequest(format!("invalid octal mode: {mode}")))
}

fn os_err(code: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(code)
}

fn read_only(path: &str) -> SandboxError {
    SandboxError::FsPermission(format!("{path}: {}", os_err(libc::EROFS)))
}

fn special(path: &str) -> SandboxError {
    SandboxError::FsPermission(format!(
        "{path}: /dev and /proc exist only inside an exec on the iii-sandbox double"
    ))
}

fn resolve(view: &GuestView, path: &str, original: &str) -> Result<Resolved, SandboxError> {
    view.resolve(path, true).map_err(|e| match e {
        ResolveError::Relative(_) | ResolveError::Nul => {
            SandboxError::FsInvalidRequest(format!("{e}: {original}"))
        }
        ResolveError::Loop => from_io(original, &os_err(libc::ELOOP)),
    })
}

fn require_absolute(path: &str) -> Result<(), SandboxError> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(SandboxError::FsInvalidRequest(format!(
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
) -> Result<WriteResponse, SandboxError> {
    let bits = parse_mode(mode)?;
    require_absolute(path)?;
    let Some((parent_path, name)) = split_parent(path) else {
        return Err(from_io(path, &os_err(libc::EISDIR)));
    };
    let parent = resolve(view, &parent_path, path)?;
    match parent.region {
        Region::ReadOnly => return Err(read_only(path)),
        Region::Special => return Err(special(path)),
        Region::Scratch => {}
    }
    let io = |e: std::io::Error| from_io(path, &e);
    let root = open_root(view).map_err(io)?;
    let dir = if parents {
        mkdir_all(&root, &parent.guest).map_err(io)?
    } else {
        match open_dir(&root, &parent.guest) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SandboxError::FsParentNotFound(format!(
                    "parent not found: {parent_path}"
                )))
            }
            Err(e) => return Err(io(e)),
        }
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
pub fn read_file(view: &GuestView, path: &str) -> Result<ReadResponse, SandboxError> {
    require_absolute(path)?;
    let target = resolve(view, path, path)?;
    let io = |e: std::io::Error| from_io(path, &e);
    let file = match target.region {
        Region::Special => return Err(special(path)),
        // O_NONBLOCK: a FIFO must not hang the call.
        Region::ReadOnly => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&target.host)
            .map_err(io)?,
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            let fd = open_in_root(&root, &target.guest, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0)
                .map_err(io)?;
            std::fs::File::from(fd)
        }
    };
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(SandboxError::FsWrongType(format!("is a directory: {path}")));
    }
    if !meta.is_file() {
        return Err(SandboxError::FsIo(format!("{path}: not a regular file")));
    }
    let size = meta.len();
    let mut body = None;
    if (size as usize) < INLINE_CAP {
        let mut buf = Vec::with_capacity(size as usize);
        file.take(INLINE_CAP as u64)
            .read_to_end(&mut buf)
            .map_err(|e| SandboxError::FsIo(format!("read buffer: {e}")))?;
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
) -> Result<MkdirResponse, SandboxError> {
    let bits = parse_mode(mode)?;
    require_absolute(path)?;
    let target = resolve(view, path, path)?;
    let io = |e: std::io::Error| from_io(path, &e);
    let exists = match target.region {
        Region::Special => return Err(special(path)),
        Region::ReadOnly => target.host.exists(),
        Region::Scratch => {
            let root = open_root(view).map_err(io)?;
            open_in_root(&root, &target.guest, OFlag::O_PATH, 0).is_ok()
        }
    };
    if exists {
        if parents {
            return Ok(MkdirResponse { created: false });
        }
        return Err(SandboxError::FsAlreadyExists(format!(
            "path already exists: {path}"
        )));
    }
    let Some((parent_path, name)) = split_parent(path) else {
        return Err(io(os_err(libc::EEXIST)));
    };
    let parent = resolve(view, &parent_path, path)?;
    match parent.region {
        Region::ReadOnly => return Err(read_only(path)),
        Region::Special => return Err(special(path)),
        Region::Scratch => {}
    }
    let root = open_root(view).map_err(io)?;
    let dir = if parents {
        mkdir_all(&root, &parent.guest).map_err(io)?
    } else {
        open_dir(&root, &parent.guest).map_err(io)?
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
    Ok(MkdirResponse { created: true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox_double::error::SCode;
    use crate::sandbox_double::isolation::{HostLayout, Scratch};
    use rstest::rstest;

    struct Fixture {
        scratch: Scratch,
    }

    impl Fixture {
        fn new() -> Fixture {
            let layout = HostLayout::detect().expect("layout");
            Fixture {
                scratch: Scratch::create(&layout, uuid::Uuid::new_v4()).expect("scratch"),
            }
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

    fn code<T: std::fmt::Debug>(r: Result<T, SandboxError>) -> (SCode, String) {
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
    #[case("/usr/evil")]
    #[case("/etc/evil")]
    #[case("/bin/evil")]
    fn read_only_binds_refuse_writes(#[case] path: &str) {
        let f = Fixture::new();
        let (c, msg) = code(write_file(f.view(), path, "0644", false, b"x"));
        assert_eq!(c, SCode::S215);
        assert!(msg.contains("Read-only file system"), "{msg}");
        let (c, _) = code(make_dir(f.view(), &format!("{path}-dir"), "0755", true));
        assert_eq!(c, SCode::S215);
    }

    #[test]
    fn read_only_binds_are_readable() {
        let f = Fixture::new();
        let r =
            read_file(f.view(), "/etc/hostname").or_else(|_| read_file(f.view(), "/etc/passwd"));
        assert!(r.is_ok_and(|r| r.body.is_some()));
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
