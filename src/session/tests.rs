//! The session turn's exec and verdicts, and turns run on this host as a VM runs them.

use std::io::Write;
use std::process::{Command, Stdio};

use rstest::rstest;

use super::*;
use crate::sandbox::Outcome;

fn out(stderr: &str, code: i32) -> ExecOutput {
    ExecOutput::exited(stderr, code)
}

#[rstest]
#[case(
    "printed\n\u{1e}SCR-SESSION new exit 0\n",
    0,
    Interpreter::Started,
    Some(0),
    "printed\n"
)]
#[case(
    "\u{1e}SCR-SESSION continued exit 3\n",
    3,
    Interpreter::Found,
    Some(3),
    ""
)]
#[case(
    "cut by the daemon",
    1,
    Interpreter::Found,
    Some(1),
    "cut by the daemon"
)]
#[case(
    "guest wrote \u{1e}SCR-SESSION new lost\n\u{1e}SCR-SESSION continued exit 7\n",
    7,
    Interpreter::Found,
    Some(7),
    "guest wrote \u{1e}SCR-SESSION new lost\n"
)]
fn a_turn_that_ran_gives_the_runs_own_output(
    #[case] stderr: &str,
    #[case] rc: i32,
    #[case] found: Interpreter,
    #[case] code: Option<i32>,
    #[case] left: &str,
) {
    let Turn::Ran(which, o) = verdict(out(stderr, rc), 1000) else {
        panic!("ran")
    };
    assert_eq!((which, o.exit_code, o.stderr.as_str()), (found, code, left));
}

#[test]
fn lost_and_timed_out_turns_are_told_apart_from_exit_codes() {
    assert_eq!(
        verdict(out("\u{1e}SCR-SESSION continued lost\n", 0), 5),
        Turn::Lost(Interpreter::Found, String::new())
    );
    assert_eq!(
        verdict(out("boot failed\n\u{1e}SCR-SESSION new lost\n", 0), 5),
        Turn::Lost(Interpreter::Started, "boot failed\n".into())
    );
    let Turn::TimedOut(e) = verdict(out("\u{1e}SCR-SESSION continued timeout\n", 124), 1500) else {
        panic!("timed out")
    };
    assert_eq!(e.outcome(), Outcome::Timeout);
    // A run that itself exits 124 ran.
    assert!(matches!(
        verdict(out("\u{1e}SCR-SESSION continued exit 124\n", 124), 5),
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
    let found = turn_exec(Lang::Python, &p, false);
    let start = turn_exec(Lang::Python, &p, true);
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
            ["SCR_TURN"],
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
            eprintln!(
                "skipped: a session's turn starts as root and drops to the guest user; run as root"
            );
            return None;
        }
        Some(HostSession {
            dir: base.join(".scr").join("session"),
            lang,
        })
    }

    fn turn(&self, code: &str, timeout_ms: u64, start: bool) -> Turn {
        let p = crate::guest::run_exec_with_result(self.lang, code, timeout_ms, "sec", 1000);
        let e = turn_exec(self.lang, &p, start);
        let mut child = Command::new(&e.argv[0])
            .args(&e.argv[1..])
            .envs(&e.env)
            .env("SCR_SESSION", &self.dir)
            .current_dir("/tmp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(e.stdin.as_deref().unwrap())
            .unwrap();
        let done = child.wait_with_output().unwrap();
        let o = ExecOutput {
            stdout: String::from_utf8_lossy(&done.stdout).into(),
            stderr: String::from_utf8_lossy(&done.stderr).into(),
            exit_code: done.status.code(),
            duration_ms: 0,
        };
        verdict(o, timeout_ms)
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
            if pid.trim().parse::<u32>().is_ok_and(|p| p > 1) {
                let group = format!("-{}", pid.trim());
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            }
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
    let lost = |code| {
        matches!(
            s.turn(code, 5_000, false),
            Turn::Lost(Interpreter::Found, _)
        )
    };
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
