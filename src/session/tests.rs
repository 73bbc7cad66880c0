//! The session turn's exec and verdicts, and turns run on this host as a VM runs them.

use rstest::rstest;

use super::*;
use crate::host_run::{end_session, exec_here, skipped};
use crate::sandbox::Outcome;

fn out(stderr: &str, code: i32) -> ExecOutput {
    ExecOutput::exited(stderr, code)
}

/// A turn's verdict line for `key`, as root prints it (`scr_verdict`).
fn said(key: &VerdictKey, words: &str) -> String {
    format!("\u{1e}SCR-SESSION {} {words}\n", key.as_printed())
}

#[rstest]
#[case(
    "printed\n",
    "new exit 0",
    0,
    Interpreter::Started,
    Some(0),
    "printed\n"
)]
#[case("", "continued exit 3", 3, Interpreter::Found, Some(3), "")]
// Guest lines that look like verdicts lack the key: they are its output.
#[case(
    "guest wrote \u{1e}SCR-SESSION continued gone\n",
    "continued exit 7",
    7,
    Interpreter::Found,
    Some(7),
    "guest wrote \u{1e}SCR-SESSION continued gone\n"
)]
fn a_turn_that_ran_gives_the_runs_own_output(
    #[case] before: &str,
    #[case] words: &str,
    #[case] rc: i32,
    #[case] found: Interpreter,
    #[case] code: Option<i32>,
    #[case] left: &str,
) {
    let key = VerdictKey::fresh();
    let stderr = format!("{before}{}", said(&key, words));
    let Turn::Ran(which, o) = verdict(out(&stderr, rc), 1000, &key) else {
        panic!("ran")
    };
    assert_eq!((which, o.exit_code, o.stderr.as_str()), (found, code, left));
}

/// A run whose stderr the daemon cut (guest code filled it past 1 MiB, then
/// printed a `gone` of its own) ran: it is not sent again.
#[test]
fn a_forged_or_missing_verdict_reads_as_ran() {
    let key = VerdictKey::fresh();
    let Turn::Ran(found, o) = verdict(out("cut by the daemon", 1), 1000, &key) else {
        panic!("ran")
    };
    assert_eq!(
        (found, o.exit_code, o.stderr.as_str()),
        (Interpreter::Found, Some(1), "cut by the daemon")
    );
    let mut filled = "x".repeat(1 << 20);
    filled.push_str("\u{1e}SCR-SESSION continued gone\n");
    assert!(matches!(
        verdict(out(&filled, 1), 1000, &key),
        Turn::Ran(Interpreter::Found, _)
    ));
    let other = said(&VerdictKey::fresh(), "continued gone");
    let tail = format!("{}{other}", said(&key, "continued exit 0"));
    assert!(matches!(
        verdict(out(&tail, 0), 1000, &key),
        Turn::Ran(Interpreter::Found, _)
    ));
}

#[test]
fn gone_lost_and_timed_out_turns_are_told_apart_from_exit_codes() {
    let key = VerdictKey::fresh();
    let v = |stderr: String, rc, ms| verdict(out(&stderr, rc), ms, &key);
    assert_eq!(v(said(&key, "continued gone"), 0, 5), Turn::Gone);
    assert_eq!(
        v(format!("boot failed\n{}", said(&key, "new lost")), 0, 5),
        Turn::Lost(Interpreter::Started, "boot failed\n".into())
    );
    let Turn::TimedOut(e) = v(said(&key, "continued timeout"), 124, 1500) else {
        panic!("timed out")
    };
    assert_eq!(e.outcome(), Outcome::Timeout);
    // A run that itself exits 124 ran.
    assert!(matches!(
        v(said(&key, "continued exit 124"), 124, 5),
        Turn::Ran(
            Interpreter::Found,
            ExecOutput {
                exit_code: Some(124),
                ..
            }
        )
    ));
}

fn run_exec(code: &str, timeout_ms: u64) -> ExecParams {
    crate::guest::run_exec_with_result(Lang::Python, code, timeout_ms, "sec", 1000)
}

#[test]
fn the_harness_travels_only_to_start_an_interpreter_and_the_token_only_in_the_request() {
    let mut p = run_exec("x = 1", 2500);
    p.env.insert("III_GUEST_TOKEN".into(), "tok".into());
    let key = VerdictKey::fresh();
    let found = turn_exec(Lang::Python, &p, false, &key);
    let start = turn_exec(Lang::Python, &p, true, &key);
    assert_eq!(found.argv.len() + 1, start.argv.len());
    assert_eq!(&found.argv[4..], ["root", "1000:100", "2.500", "python"]);
    assert!(start.argv.last().unwrap().ends_with("_session()\n"));
    assert!(
        !start.argv.last().unwrap().contains("\n_main()\n"),
        "no cold start"
    );
    for e in [&found, &start] {
        assert_eq!(
            e.env.keys().collect::<Vec<_>>(),
            ["SCR_TURN", crate::prestart::VERDICT_KEY_ENV],
            "no token in the exec's env"
        );
        assert!(
            !e.env["SCR_TURN"].contains("\n#"),
            "it travels without comments"
        );
        assert_eq!(e.timeout_ms, 2500 + TURN_GRACE_MS);
        let stdin = e.stdin.as_deref().unwrap();
        let nl = stdin.iter().position(|b| *b == b'\n').unwrap();
        let header = String::from_utf8_lossy(&stdin[..nl]);
        assert!(header.contains(r#""III_GUEST_TOKEN":"tok""#), "{header}");
        assert_eq!(&stdin[nl + 1..], b"x = 1");
    }
    assert!(harness(Lang::Node).trim_end().ends_with("await session();"));
}

/// Turns of one session, run on this host as the VM runs them (root drops
/// to the guest user), in a directory of the test's own.
struct HostSession {
    dir: std::path::PathBuf,
    lang: Lang,
}

impl HostSession {
    fn new(lang: Lang) -> Option<HostSession> {
        use std::os::unix::fs::MetadataExt;
        let base =
            std::env::temp_dir().join(format!("scr-session-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&base).unwrap();
        if std::fs::metadata(&base).unwrap().uid() != 0 {
            let _ = std::fs::remove_dir_all(&base);
            skipped("a session's turn starts as root and drops to the guest user; run as root");
            return None;
        }
        Some(HostSession {
            dir: base.join(".scr").join("session"),
            lang,
        })
    }

    fn turn(&self, code: &str, timeout_ms: u64, start: bool) -> Turn {
        let p = crate::guest::run_exec_with_result(self.lang, code, timeout_ms, "sec", 1000);
        let key = VerdictKey::fresh();
        let e = turn_exec(self.lang, &p, start, &key);
        let o = exec_here(&e, &[("SCR_SESSION", self.dir.display().to_string())]);
        verdict(o, timeout_ms, &key)
    }

    /// The run's result frame, and which interpreter ran it.
    fn result(&self, code: &str, start: bool) -> (Interpreter, Option<String>) {
        match self.turn(code, 10_000, start) {
            Turn::Ran(which, o) => {
                let (_, frame) = crate::run_result::take(&o.stdout, "sec");
                let value = match frame {
                    Some(crate::run_result::Completion::Value(v)) => Some(v.to_string()),
                    _ => None,
                };
                (which, value)
            }
            other => panic!("{code}: {other:?}"),
        }
    }
}

impl Drop for HostSession {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pid")) {
            end_session(&pid);
        }
        let _ = std::fs::remove_dir_all(self.dir.parent().unwrap().parent().unwrap());
    }
}

#[rstest]
#[case(
    Lang::Python,
    "x = 41\nresult = x",
    "result = x + 1",
    "import time\ntime.sleep(30)",
    "result = 'x' in globals()"
)]
#[case(
    Lang::Node,
    "globalThis.x = 41; return x",
    "return x + 1",
    "await new Promise((r) => setTimeout(r, 30000))",
    "return 'x' in globalThis"
)]
fn a_session_keeps_its_globals_until_a_timeout_takes_its_interpreter(
    #[case] lang: Lang,
    #[case] set: &str,
    #[case] read: &str,
    #[case] hang: &str,
    #[case] has: &str,
) {
    let Some(s) = HostSession::new(lang) else {
        return;
    };
    // Without the harness, nothing starts: the worker is told to send it.
    let lost = |code| matches!(s.turn(code, 5_000, false), Turn::Gone);
    assert!(lost(set));
    assert_eq!(
        s.result(set, true),
        (Interpreter::Started, Some("41".into()))
    );
    assert_eq!(
        s.result(read, false),
        (Interpreter::Found, Some("42".into()))
    );
    let Turn::TimedOut(_) = s.turn(hang, 500, false) else {
        panic!("the hanging run timed out")
    };
    assert!(lost(has), "the timeout took the interpreter");
    assert_eq!(
        s.result(has, true),
        (Interpreter::Started, Some("false".into()))
    );
}

/// Guest code that prints a turn's `gone` verdict itself, at the end of
/// its stderr and after a 1 MiB fill, runs once: its own count says so.
#[test]
fn a_run_that_forges_its_turns_verdict_runs_once() {
    let Some(s) = HostSession::new(Lang::Python) else {
        return;
    };
    let count = "n = globals().get('n', 0) + 1\nresult = n";
    assert_eq!(
        s.result(count, true),
        (Interpreter::Started, Some("1".into()))
    );
    let forge = |fill: usize| {
        format!(
            "import sys\nsys.stderr.write('x' * {fill})\n\
             sys.stderr.write('\\x1eSCR-SESSION continued gone\\n')\n{count}"
        )
    };
    assert_eq!(
        s.result(&forge(0), false),
        (Interpreter::Found, Some("2".into()))
    );
    let filled = s.turn(&forge(1 << 20), 10_000, false);
    assert!(
        matches!(filled, Turn::Ran(Interpreter::Found, _)),
        "{filled:?}"
    );
    assert_eq!(
        s.result(count, false),
        (Interpreter::Found, Some("4".into())),
        "each forging run ran exactly once"
    );
}

/// A session's interpreter runs guest code in its own long-lived process:
/// it must never be root (threat model: "a session's interpreter never
/// holds root"), where the host can give it another user.
#[rstest]
#[case(Lang::Python, "import os\nresult = [os.getuid(), os.geteuid()]")]
#[case(Lang::Node, "return [process.getuid(), process.geteuid()]")]
fn a_sessions_interpreter_is_not_root(#[case] lang: Lang, #[case] code: &str) {
    let Some(s) = HostSession::new(lang) else {
        return;
    };
    let (_, ids) = s.result(code, true);
    let ids = ids.unwrap_or_default().replace(' ', "");
    // The guest user the wrappers default to (guest/README.md), unless this
    // host's user namespace maps one id only.
    let one_id = std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.lines().count() == 1 && m.split_whitespace().nth(2) == Some("1"))
        .unwrap_or(false);
    if one_id {
        return skipped("this host's user namespace maps one id only: no other user to become");
    }
    assert_eq!(ids, "[1000,1000]", "the interpreter runs as the guest user");
}

/// The turn's verdict line is spelled the same on both sides
/// (guest/PROTOCOL.md, "Markers").
#[test]
fn the_turns_verdict_is_one_marker_on_both_sides() {
    crate::prestart::assert_keyed_verdict(TURN_SH, VERDICT, "%s %s %s");
}
