//! The fs operations on a sandbox: guest paths, the image rootfs and the
//! private scratch, errors as the daemon words them.

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
