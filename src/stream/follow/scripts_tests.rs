//! `tee.sh` and `follow.sh` run by this host's `sh`, as a VM runs them: a
//! wrapped command keeps its own streams whole, the copies hold the same
//! bytes up to their cap, and a follower reads only its exec's copies and
//! says `end` only once both tees are gone.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use rstest::rstest;

use super::*;

/// A fresh directory for the copies (the scripts make `live` in it).
fn live_dir() -> (PathBuf, String) {
    let base = std::env::temp_dir().join(format!("scr-tee-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&base).unwrap();
    let live = base.join("live");
    let s = live.to_str().unwrap().to_string();
    (base, s)
}

fn command(argv: &[String]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c
}

fn wrapped(argv: &[&str], dir: &str, gen: &str, cap: u64) -> Vec<String> {
    let p = ExecParams {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecParams::default()
    };
    behind_copy(p, dir, gen, cap).argv
}

fn follow(dir: &str, gen: &str, seen: (u64, u64), polls: u32) -> String {
    let out = Command::new("sh")
        .args(["-c", FOLLOW_SH, "sh", dir, gen])
        .args([seen.0, seen.1, polls as u64, 1 << 20].map(|n| n.to_string()))
        .output()
        .unwrap();
    assert!(out.status.success(), "follow.sh: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn read(dir: &str, name: &str) -> Vec<u8> {
    std::fs::read(format!("{dir}/{name}")).unwrap_or_default()
}

#[rstest]
// A relay or a turn: the copy is set up in the script's own shell.
#[case::in_its_own_shell(&["sh", "-c", "printf 'out\\n'; printf err >&2; exit 3", "sh"])]
// Any other argv: a shell sets the copy up and execs it.
#[case::exec_by_a_shell(&["sh", "-ec", "printf 'out\\n'; printf err >&2; exit 3"])]
fn a_wrapped_command_keeps_its_streams_and_they_are_copied(#[case] argv: &[&str]) {
    let (base, dir) = live_dir();
    let Output {
        status,
        stdout,
        stderr,
    } = command(&wrapped(argv, &dir, "g.1", 4 << 20))
        .output()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(stdout, b"out\n");
    assert_eq!(stderr, b"err");
    assert_eq!(read(&dir, "1"), b"out\n");
    assert_eq!(read(&dir, "2"), b"err");
    // The exec has answered: a follower reads it all, and says `end`
    // once both tees are gone (they close the streams just before they
    // go: it waits in the script, up to 50 polls, for that); another
    // exec's follower sees nothing of it.
    let all = follow(&dir, "g.1", (0, 0), 0);
    let data = format!("1 {}\n2 {}\n", b64(b"out\n"), b64(b"err"));
    assert!(all == data || all == data.clone() + "end\n", "{all:?}");
    assert_eq!(follow(&dir, "g.1", (4, 3), 50), "end\n");
    assert_eq!(follow(&dir, "g.2", (0, 0), 0), "");
    std::fs::remove_dir_all(base).unwrap();
}

#[test]
fn the_copy_stops_at_its_cap_and_the_stream_does_not() {
    let (base, dir) = live_dir();
    let argv = ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x", "sh"];
    let out = command(&wrapped(&argv, &dir, "g.1", 1000))
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), 5000, "the exec's own stream is whole");
    // `ulimit -f` counts 512-byte blocks: the cap, rounded up to one.
    let copied = read(&dir, "1").len();
    assert!((1000..=1024).contains(&copied), "copied {copied}");
    std::fs::remove_dir_all(base).unwrap();
}

#[test]
fn a_follower_of_a_running_exec_reads_what_is_there_and_no_end() {
    let (base, dir) = live_dir();
    // It writes, then waits on its stdin.
    let argv = ["sh", "-c", "printf early; read -r _; printf late", "sh"];
    let mut child = command(&wrapped(&argv, &dir, "g.1", 4 << 20))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The follower waits in the script (up to 50 polls) for the copy to grow.
    assert_eq!(
        follow(&dir, "g.1", (0, 0), 50),
        format!("1 {}\n", b64(b"early"))
    );
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.stdout, b"earlylate");
    let rest = follow(&dir, "g.1", (5, 0), 0);
    assert!(
        rest.starts_with(&format!("1 {}\n", b64(b"late"))),
        "{rest:?}"
    );
    assert_eq!(follow(&dir, "g.1", (9, 0), 50), "end\n");
    std::fs::remove_dir_all(base).unwrap();
}
