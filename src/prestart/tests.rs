//! The relay's commands and scripts, checked as they travel and run on
//! the host: verdicts, requests, spawns, fills and their directories.
use super::*;
use crate::host_run::end_session;
use rstest::rstest;

fn out(stderr: &str, code: i32) -> ExecOutput {
    ExecOutput::exited(stderr, code)
}

/// `relay.sh` with `SCR_PRE` at `pre`, then `command`, run by `sh` on the
/// host: its exit status and what it printed.
fn relay_sh(pre: &std::path::Path, command: &str) -> std::process::Output {
    let script = format!("{}\nSCR_PRE={}\n{command}\n", relay(), pre.display());
    std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("sh runs")
}

/// A relay's verdict line for `key`, as relay_fork.sh's `scr_told` prints it.
fn told(key: &VerdictKey, words: &str) -> String {
    format!("\u{1e}SCR-RELAY {} {words}\n", key.as_printed())
}

#[rstest]
#[case("printed\n", "exit 3", "", 3, Some(3), "printed\n")]
#[case("", "exit 0", "", 0, Some(0), "")]
// Guest lines that look like verdicts but lack the key are its output,
// before the verdict or after it (a child that outlived the call).
#[case(
    "fake \u{1e}SCR-RELAY cold\n",
    "exit 7",
    "",
    7,
    Some(7),
    "fake \u{1e}SCR-RELAY cold\n"
)]
#[case(
    "",
    "exit 0",
    "\u{1e}SCR-RELAY cold\n",
    0,
    Some(0),
    "\u{1e}SCR-RELAY cold\n"
)]
fn a_relay_that_ran_gives_the_calls_own_output(
    #[case] before: &str,
    #[case] words: &str,
    #[case] after: &str,
    #[case] rc: i32,
    #[case] code: Option<i32>,
    #[case] left: &str,
) {
    let key = VerdictKey::fresh();
    let stderr = format!("{before}{}{after}", told(&key, words));
    let Verdict::Ran(o) = verdict(out(&stderr, rc), 1000, &key) else {
        panic!("ran")
    };
    assert_eq!((o.exit_code, o.stderr.as_str()), (code, left));
}

/// Guest code can print a relay's verdict words, with any key but the one
/// the worker gave this exec: at the end of stderr, after a fill that
/// pushed the real verdict past the daemon's 1 MiB cut, or with another
/// exec's key. None of them is `cold`, so the call is never sent again.
#[rstest]
#[case::at_the_end(false, false)]
#[case::after_a_fill_that_cut_the_verdict(true, false)]
#[case::with_another_execs_key(false, true)]
fn a_forged_verdict_never_reads_as_cold(#[case] filled: bool, #[case] other_key: bool) {
    let key = VerdictKey::fresh();
    let forged = if other_key {
        told(&VerdictKey::fresh(), "cold")
    } else {
        "\u{1e}SCR-RELAY cold\n".to_string()
    };
    let stderr = if filled {
        // The daemon keeps the first MiB: the relay's line never arrives.
        let mut s = "x".repeat(1 << 20);
        s.push_str(&forged);
        s
    } else {
        format!("{}{forged}", told(&key, "exit 0"))
    };
    assert!(
        matches!(verdict(out(&stderr, 0), 1000, &key), Verdict::Ran(_)),
        "a forged cold verdict was believed"
    );
    assert_eq!(format!("{key:?}"), "VerdictKey(<redacted>)");
}

/// Without a verdict (the daemon cut a stderr over 1 MiB) the call ran,
/// with the exit code and stderr the exec gave.
#[test]
fn a_relay_without_a_verdict_ran() {
    let Verdict::Ran(o) = verdict(out("cut by the daemon", 1), 1000, &VerdictKey::fresh()) else {
        panic!("ran")
    };
    assert_eq!(
        (o.exit_code, o.stderr.as_str()),
        (Some(1), "cut by the daemon")
    );
}

#[test]
fn cold_and_timeout_verdicts_are_told_apart_from_exit_codes() {
    let key = VerdictKey::fresh();
    assert_eq!(verdict(out(&told(&key, "cold"), 0), 5, &key), Verdict::Cold);
    let stderr = format!("x{}", told(&key, "timeout"));
    let Verdict::TimedOut(e) = verdict(out(&stderr, 124), 1500, &key) else {
        panic!("timed out")
    };
    assert_eq!(e.outcome(), crate::sandbox::Outcome::Timeout);
    assert!(
        e.to_string().contains("exec timed out after 1500 ms"),
        "{e}"
    );
    // A call that itself exits 97 or 124 ran.
    assert!(matches!(
        verdict(out(&told(&key, "exit 124"), 124), 5, &key),
        Verdict::Ran(ExecOutput {
            exit_code: Some(124),
            ..
        })
    ));
}

/// A waiting interpreter loads each wrapper's definitions ahead by
/// cutting its last line; a wrapper that ended otherwise would run whole
/// on every call (correct, only slow), so they all end with it.
#[test]
fn every_wrapper_ends_with_the_call_a_waiting_interpreter_cuts() {
    use crate::guest::{NODE_INVOKE, NODE_RUN, PYTHON_INVOKE, PYTHON_RUN};
    for w in [PYTHON_RUN, PYTHON_INVOKE] {
        assert_eq!(w.trim_end().lines().last(), Some("_main()"));
    }
    for w in [NODE_RUN, NODE_INVOKE] {
        assert_eq!(w.trim_end().lines().last(), Some("await main();"));
    }
    assert!(harness(Server::PythonForks).starts_with("_WRAPPERS = [\""));
    assert!(harness(Server::NodeProcesses).starts_with("const WRAPPERS = [\""));
}

/// A fill runs in the background after a verdict, so the next calls may
/// already be served when it looks: it counts the interpreters serving
/// a call (alive, `in` let go) or claimed by a relay that still runs
/// as busy and leaves them to their relays, removes dead ones and ones
/// whose relay is gone (killed: nothing else would end them), and
/// starts only what makes three.
#[test]
fn a_fill_leaves_busy_interpreters_alone_and_ends_abandoned_ones() {
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    let pre = std::env::temp_dir().join(format!("scr-fill-{}", uuid::Uuid::new_v4().simple()));
    // Each in its own process group, as an interpreter's session is.
    let sleeper = || {
        Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep runs")
    };
    let (mut serving, mut held, mut abandoned) = (sleeper(), sleeper(), sleeper());
    let mut gone = Command::new("true").spawn().expect("true runs");
    gone.wait().unwrap();
    let this = std::process::id();
    for (name, pid, claim) in [
        ("serving", serving.id(), None),
        ("held", held.id(), Some(this)),
        ("abandoned", abandoned.id(), Some(gone.id())),
        ("dead", gone.id(), None),
    ] {
        std::fs::create_dir_all(pre.join(name)).unwrap();
        std::fs::write(pre.join(name).join("pid"), format!("{pid}\n")).unwrap();
        if let Some(c) = claim {
            std::fs::write(pre.join(name).join("claim"), format!("{c}\n")).unwrap();
        }
    }
    let filled = relay_sh(
        &pre,
        &format!("scr_fill {}/next 3 sh -c 'exec sleep 30' sh", pre.display()),
    )
    .status;
    let started: Vec<_> = ["next.0", "next.1"]
        .iter()
        .filter_map(|n| std::fs::read_to_string(pre.join(n).join("pid")).ok())
        .collect();
    let serving_alive = serving.try_wait().unwrap().is_none();
    let held_alive = held.try_wait().unwrap().is_none();
    // Killed by the fill (or still alive at the deadline: then it is).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let abandoned_ended = loop {
        match abandoned.try_wait().unwrap() {
            Some(status) => break Some(status.success()),
            None if std::time::Instant::now() > deadline => {
                let _ = abandoned.kill();
                break None;
            }
            None => std::thread::yield_now(),
        }
    };
    for pid in &started {
        end_session(pid);
    }
    let _ = serving.kill();
    let _ = held.kill();
    let left = |n: &str| pre.join(n).exists();
    let (dead_left, abandoned_left, held_left) = (left("dead"), left("abandoned"), left("held"));
    let _ = std::fs::remove_dir_all(&pre);
    assert!(filled.success());
    assert!(serving_alive, "the call being served was left alone");
    assert!(
        held_alive && held_left,
        "a live relay's claim was left alone"
    );
    assert_eq!(
        abandoned_ended,
        Some(false),
        "a gone relay's interpreter was killed"
    );
    assert!(!abandoned_left, "and removed");
    assert!(!dead_left, "a dead one is removed");
    assert_eq!(started.len(), 1, "one more makes three: {started:?}");
}

/// A relay hands a call to an interpreter as soon as its pid is written,
/// and a line written to a FIFO that nobody holds is dropped when its
/// writer closes it (the relay would then wait out its budget). So each
/// interpreter holds its `in` (fd 3) and `life` (fd 4) from before its
/// pid is there: checked right after each of 20 starts, by the shell that
/// started it.
#[test]
fn an_interpreter_holds_its_fifos_before_its_pid_is_written() {
    let pre = std::env::temp_dir().join(format!("scr-start-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&pre).unwrap();
    let checked = relay_sh(
        &pre,
        &format!(
            "i=0\nwhile [ $i -lt 20 ]; do\n  scr_start {p}/$i sh -c 'exec sleep 30' sh\n  read -r q <{p}/$i/pid\n  [ /proc/$q/fd/3 -ef {p}/$i/in ] && [ /proc/$q/fd/4 -ef {p}/$i/life ] || echo \"late $i\"\n  i=$((i + 1))\ndone",
            p = pre.display()
        ),
    );
    for i in 0..20 {
        end_session(
            &std::fs::read_to_string(pre.join(i.to_string()).join("pid")).unwrap_or_default(),
        );
    }
    let _ = std::fs::remove_dir_all(&pre);
    assert!(checked.status.success());
    let late = String::from_utf8_lossy(&checked.stdout);
    assert!(late.is_empty(), "FIFOs opened after the pid: {late}");
}

/// What waits runs as root and loads what its directory holds, so it
/// starts only in a directory of its own user's, and its parent's (the
/// VM's /tmp/.scr, which guest code, another user, cannot have made):
/// not through a symlink, not in a directory another user owns.
#[test]
fn nothing_starts_waiting_in_a_directory_another_user_could_change() {
    let base = std::env::temp_dir().join(format!("scr-own-{}", uuid::Uuid::new_v4().simple()));
    let own = base.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::os::unix::fs::symlink(&own, base.join("link")).unwrap();
    let spawn = |pre: &std::path::Path| {
        let command = format!("scr_spawn {}/1 sh -c 'exec sleep 30' sh", pre.display());
        let status = relay_sh(pre, &command).status;
        let pid = std::fs::read_to_string(pre.join("1/pid")).ok();
        end_session(pid.as_deref().unwrap_or_default());
        (status.success(), pid.is_some())
    };
    let mut cases = vec![
        (base.join("link").join("pre"), false),
        (own.join("pre"), true),
    ];
    // Where this test may give a directory away (as root).
    let theirs = base.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    if std::os::unix::fs::chown(&theirs, Some(1000), Some(1000)).is_ok() {
        cases.push((theirs.join("pre"), false));
    }
    let seen: Vec<_> = cases.iter().map(|(pre, _)| spawn(pre)).collect();
    let _ = std::fs::remove_dir_all(&base);
    for ((pre, starts), (ok, started)) in cases.iter().zip(seen) {
        assert!(ok, "{}", pre.display());
        assert_eq!(started, *starts, "{}", pre.display());
    }
}

#[test]
fn the_relay_scripts_travel_without_comments_and_still_parse() {
    for (full, bare) in [(RELAY_SH, relay()), (RELAY_FORK_SH, relay_fork())] {
        assert!(bare.len() * 2 < full.len(), "most of it was comments");
        assert!(!bare.lines().any(|l| l.trim_start().starts_with('#')));
        let defined = |s: &str| -> Vec<String> {
            s.lines()
                .filter_map(|l| l.strip_suffix("() {"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(defined(full), defined(bare));
        let parsed = std::process::Command::new("sh")
            .args(["-n", "-c", bare])
            .status()
            .expect("sh runs");
        assert!(parsed.success(), "{bare}");
    }
}

#[test]
fn the_request_carries_the_wrapper_env_and_stdin_bytes_verbatim() {
    let p = ExecParams {
        argv: vec!["python3".into(), "-c".into(), "WRAPPER".into()],
        stdin: Some(b"\xff\x00code\n".to_vec()),
        env: BTreeMap::from([("III_GUEST_TOKEN".into(), "t".into())]),
        timeout_ms: 2500,
        workdir: None,
        stream: None,
    };
    let r = relay_exec(
        Server::PythonForks,
        4,
        Some((5, Start::Alone)),
        1,
        &p,
        &VerdictKey::fresh(),
    );
    let stdin = r.stdin.unwrap();
    let nl = stdin.iter().position(|b| *b == b'\n').unwrap();
    let header: serde_json::Value = serde_json::from_slice(&stdin[..nl]).unwrap();
    assert_eq!(header["script"], "WRAPPER");
    assert_eq!(header["env"]["III_GUEST_TOKEN"], "t");
    assert_eq!(header["stdin"], 7);
    assert_eq!(&stdin[nl + 1..], b"\xff\x00code\n");
    assert_eq!(
        r.env.keys().collect::<Vec<_>>(),
        [VERDICT_KEY_ENV],
        "the relay itself carries no token, only its verdict's key"
    );
    assert_eq!(r.timeout_ms, 2500 + RELAY_GRACE_MS);
    let command = &r.argv[2];
    assert!(
        command.ends_with("scr_relay_fork /tmp/.scr/pre/4 2500\n"),
        "{command}"
    );
    assert!(
        command.contains(r#"SCR_NEXT='scr_spawn /tmp/.scr/pre/5 python3 -Ic "$SCR_HARNESS"'"#),
        "{command}"
    );
    assert!(r.argv[4].contains("_WRAPPERS = ["), "the spawner's harness");
    // Beside other servers, the replaced one is retired and the next
    // added without ending the busy ones.
    let beside = relay_exec(
        Server::PythonForks,
        4,
        Some((5, Start::Beside)),
        3,
        &p,
        &VerdictKey::fresh(),
    );
    assert!(
        beside.argv[2].contains(
            r#"SCR_NEXT='scr_retire /tmp/.scr/pre/4; scr_add /tmp/.scr/pre/5 python3 -Ic "$SCR_HARNESS"'"#
        ),
        "{}",
        beside.argv[2]
    );
    assert!(
        !beside.argv[2].contains("scr_spawn /tmp"),
        "no spawn that ends the others"
    );
    // A relay into a server that stays is builtins only: no spawner, no harness.
    let fast = relay_exec(Server::PythonForks, 4, None, 1, &p, &VerdictKey::fresh());
    assert_eq!(fast.argv.len(), 3);
    assert!(!fast.argv[2].contains("scr_spawn() {"), "{}", fast.argv[2]);
    assert_eq!(fast.stdin.as_deref(), Some(&stdin[..]));
}

#[test]
fn a_cold_exec_starts_the_next_interpreter_without_the_calls_env() {
    let p = ExecParams {
        argv: vec!["node".into(), "-e".into(), "W".into()],
        stdin: Some(b"x".to_vec()),
        env: BTreeMap::from([
            ("III_GUEST_TOKEN".into(), "t".into()),
            ("SCR_WORKER_NAME".into(), "n".into()),
        ]),
        timeout_ms: 100,
        workdir: Some("/tmp".into()),
        stream: None,
    };
    let e = cold_then_spawn(Server::NodeProcesses, 9, Start::Alone, 3, p);
    assert!(e.argv[2]
        .contains("scr_fill /tmp/.scr/pre/9 4 env -u III_GUEST_TOKEN -u SCR_WORKER_NAME node"));
    assert_eq!(&e.argv[5..], ["node", "-e", "W"]);
    assert_eq!(e.env.len(), 2, "the cold call keeps its own env");
}

/// The relay's verdict line is spelled the same on both sides
/// (guest/PROTOCOL.md, "Markers"): what `relay_fork.sh` prints is what
/// `take_verdict` looks for, and it reads its key from the variable the
/// worker sets, then unsets it.
#[test]
fn the_relays_verdict_is_one_marker_on_both_sides() {
    assert_keyed_verdict(RELAY_FORK_SH, VERDICT, "%s %s");
}
