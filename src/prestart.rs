//! Pre-started interpreters, the guest side of them as the worker speaks
//! it: the execs that start one, relay a call into one, or run a call cold
//! and start one for the next; and what a relay's verdict means. Which VM
//! has one waiting is the VM table's (`runtime/vms`); `runtime/ready`
//! decides when.
//!
//! A waiting interpreter has loaded its harness and the iii SDK module (when
//! it is planted) but connected nothing and holds no token: it is started
//! with the VM's environment only. A call's env (its token among it) travels
//! in the relayed request. See `guest/prestart/relay.sh` for the protocol.
//! It runs as root, as every exec does, and loads only what root owns; the
//! process that runs a call (python's forked child, or the node interpreter
//! itself) drops to the guest user in the call's wrapper, before any guest
//! code, so guest code can neither change nor signal what waits.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::ids::Lang;
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

const RELAY_SH: &str = include_str!("../guest/prestart/relay.sh");
const RELAY_FORK_SH: &str = include_str!("../guest/prestart/relay_fork.sh");
const PYTHON_READY: &str = include_str!("../guest/prestart/ready.py");
const NODE_READY: &str = include_str!("../guest/prestart/ready.mjs");

/// The deadline a relay exec is sent with, past the call's own. The relay
/// enforces the call's budget itself (and kills the interpreter's session,
/// which the daemon's deadline would not reach), so the daemon's is only
/// the backstop.
const RELAY_GRACE_MS: u64 = 2_000;
/// The verdict line a relay writes last on stderr.
const VERDICT: &str = "\u{1e}SCR-RELAY ";

/// A shell script as it travels in every relay's argv: without its comment
/// lines (they are most of it), which the shell would only skip.
pub(crate) fn bare(script: &str) -> String {
    script
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn relay() -> &'static str {
    static BARE: OnceLock<String> = OnceLock::new();
    BARE.get_or_init(|| bare(RELAY_SH))
}

fn relay_fork() -> &'static str {
    static BARE: OnceLock<String> = OnceLock::new();
    BARE.get_or_init(|| bare(RELAY_FORK_SH))
}

/// A waiting interpreter's directory in the VM, by generation.
fn dir(generation: u64) -> String {
    format!("/tmp/.scr/pre/{generation}")
}

/// How a new waiting interpreter starts among the ones a VM has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Alone: every other waiting server of the VM ends (none is in use).
    Alone,
    /// Beside the others, some of which serve calls now (python's fork
    /// servers, one per call slot; node's spawner never ends a busy one).
    Beside,
}

/// The shell command that starts generation `next` of `lang` in a VM that
/// runs `slots` calls at once, `prefix` (e.g. an `env -u …`) before the
/// interpreter's argv. Node keeps one interpreter more than the slots
/// waiting or busy (each call uses one up); python one server per slot,
/// counted by the VM table.
fn spawn_command(lang: Lang, next: u64, start: Start, slots: usize, prefix: &str) -> String {
    let interpreter = interpreter(lang);
    match (lang, start) {
        (Lang::Python, Start::Beside) => format!("scr_add {} {prefix}{interpreter}", dir(next)),
        (Lang::Python, Start::Alone) => format!("scr_spawn {} {prefix}{interpreter}", dir(next)),
        (Lang::Node, _) => format!(
            "scr_fill {} {} {prefix}{interpreter}",
            dir(next),
            node_interpreters(slots)
        ),
    }
}

/// Node interpreters a VM with `slots` call slots keeps, waiting or busy.
pub(crate) fn node_interpreters(slots: usize) -> usize {
    slots.max(1) + 1
}

/// The interpreter command the spawner runs (the harness is `$1` of the
/// exec's shell, kept as `SCR_HARNESS`).
fn interpreter(lang: Lang) -> &'static str {
    match lang {
        // Isolated, as every python the worker starts as root (`guest`).
        Lang::Python => r#"python3 -Ic "$SCR_HARNESS""#,
        // From the file the spawner writes from SCR_HARNESS (relay.sh): a
        // node relay, which starts the next one, need not carry it.
        Lang::Node => "node /tmp/.scr/pre/ready.mjs",
    }
}

/// The waiting interpreter's script, with the wrappers a call may run (it
/// loads their definitions ahead): a JSON array of strings is a literal in
/// both languages.
fn harness(lang: Lang) -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    static NODE: OnceLock<String> = OnceLock::new();
    let with = |wrappers: [&str; 2], assign: &str, script: &str| {
        let literal = serde_json::to_string(&wrappers).expect("strings serialize");
        format!("{assign}{literal};\n{script}")
    };
    match lang {
        Lang::Python => PYTHON.get_or_init(|| {
            let wrappers = [crate::guest::PYTHON_RUN, crate::guest::PYTHON_INVOKE];
            with(wrappers, "_WRAPPERS = ", PYTHON_READY)
        }),
        Lang::Node => NODE.get_or_init(|| {
            let wrappers = [crate::guest::NODE_RUN, crate::guest::NODE_INVOKE];
            with(wrappers, "const WRAPPERS = ", NODE_READY)
        }),
    }
}

/// `sh -c <relay.sh + command> sh <harness> <rest…>`.
fn shell(lang: Lang, command: String, rest: Vec<String>, timeout_ms: u64) -> ExecParams {
    shell_with(harness(lang), command, rest, timeout_ms)
}

/// `sh -c <relay.sh + command> sh <harness> <rest…>`, the harness given
/// (empty for a node relay: its spawner starts the next from the file).
fn shell_with(harness: &str, command: String, rest: Vec<String>, timeout_ms: u64) -> ExecParams {
    let script = format!("{}\nSCR_HARNESS=$1\n{command}\n", relay());
    let mut args = vec!["sh".to_string(), harness.to_string()];
    args.extend(rest);
    sh(script, args, timeout_ms)
}

/// `sh -c <script> <args…>` in the workdir, with no stdin or env of its own.
fn sh(script: String, args: Vec<String>, timeout_ms: u64) -> ExecParams {
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script];
    argv.extend(args);
    ExecParams {
        argv,
        stdin: None,
        env: BTreeMap::new(),
        timeout_ms,
        workdir: Some(crate::guest::WORKDIR.into()),
    }
}

/// An exec that only starts a waiting interpreter (generation `next`) in
/// a VM no call is using (it serves one call at a time until it is a
/// namespace's, whose calls fill it up to its slots).
pub(crate) fn spawn_exec(lang: Lang, next: u64) -> ExecParams {
    let command = spawn_command(lang, next, Start::Alone, 1, "");
    shell(lang, command, Vec::new(), 30_000)
}

/// `p` as it runs today, after starting a waiting interpreter for the next
/// call. The interpreter must not inherit `p`'s env (the call's token): the
/// spawner drops each of its keys.
pub(crate) fn cold_then_spawn(
    lang: Lang,
    next: u64,
    start: Start,
    slots: usize,
    p: ExecParams,
) -> ExecParams {
    let unset: String = p.env.keys().map(|k| format!("-u {k} ")).collect();
    let command = format!(
        "{}; shift; exec \"$@\"",
        spawn_command(lang, next, start, slots, &format!("env {unset}"))
    );
    let mut e = shell(lang, command, p.argv, p.timeout_ms);
    e.stdin = p.stdin;
    e.env = p.env;
    e.workdir = p.workdir;
    e
}

/// `p` handed to the interpreter waiting in generation `using` (after
/// starting generation `next`, when the VM serves later calls: `Beside`
/// other servers, python's `using` is retired at the verdict, since the
/// spawn does not end it).
pub(crate) fn relay_exec(
    lang: Lang,
    using: u64,
    next: Option<(u64, Start)>,
    slots: usize,
    p: &ExecParams,
) -> ExecParams {
    let timeout_ms = p.timeout_ms.saturating_add(RELAY_GRACE_MS);
    let mut e = match lang {
        // Python forks a child per call off its waiting server, which takes
        // the exec's own streams (nothing copied) and enforces the budget:
        // the relay is shell builtins only, and carries the spawner only
        // when the server is to be replaced.
        Lang::Python => {
            let relay = format!("scr_relay_fork {} {}", dir(using), p.timeout_ms);
            match next {
                None => sh(
                    format!("{}\n{relay}\n", relay_fork()),
                    Vec::new(),
                    timeout_ms,
                ),
                Some((n, start)) => {
                    let retire = match start {
                        Start::Beside => format!("scr_retire {}; ", dir(using)),
                        Start::Alone => String::new(),
                    };
                    let command = format!(
                        "{}\nSCR_NEXT='{retire}{}'; {relay}",
                        relay_fork(),
                        spawn_command(lang, n, start, slots, "")
                    );
                    shell(lang, command, Vec::new(), timeout_ms)
                }
            }
        }
        // Node serves one call per interpreter: it takes the exec's streams
        // itself, as a fork server's child does, and the relay's watchdog
        // enforces the budget. One more than the slots wait or serve; the
        // relay claims a warm one (relays at once each claim their own: one
        // that finds none unclaimed runs cold), and a new one starts
        // once this call has its verdict (`scr_told` runs
        // `$SCR_NEXT`, a `scr_fill`). The relay carries the spawner's
        // functions but no harness: a spawner starts node from the file.
        Lang::Node => {
            let mut command = format!("{}\n", relay_fork());
            if let Some((n, start)) = next {
                command.push_str(&format!(
                    "SCR_NEXT='{}'; ",
                    spawn_command(lang, n, start, slots, "")
                ));
            }
            command.push_str(&format!(
                "scr_relay {} {}",
                dir(using),
                seconds(p.timeout_ms)
            ));
            shell_with("", command, Vec::new(), timeout_ms)
        }
    };
    e.stdin = Some(request(p));
    e
}

/// The relayed request: a header line (the wrapper, the env, the stdin
/// length), then the stdin bytes as they are.
pub(crate) fn request(p: &ExecParams) -> Vec<u8> {
    let script = p.argv.get(p.argv.len().saturating_sub(1)).cloned();
    let stdin = p.stdin.as_deref().unwrap_or_default();
    let header = serde_json::json!({
        "script": script.unwrap_or_default(),
        "env": p.env,
        "stdin": stdin.len(),
    });
    let mut out = header.to_string().into_bytes();
    out.push(b'\n');
    out.extend_from_slice(stdin);
    out
}

/// What a relay exec came to.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// The call ran; its output as a cold exec would have given it.
    Ran(ExecOutput),
    /// Nothing ran (no interpreter was waiting, or it died before taking
    /// the request): run the call cold.
    Cold,
    /// The budget passed; the call and everything it started were killed.
    TimedOut(SandboxError),
}

/// Reads the relay's verdict off the end of its stderr. Without one (the
/// daemon cut a stderr over 1 MiB) the call ran: a call is never run twice.
pub(crate) fn verdict(mut out: ExecOutput, timeout_ms: u64) -> Verdict {
    let Some(said) = take_verdict(&mut out, VERDICT) else {
        return Verdict::Ran(out);
    };
    match said.split_once(' ') {
        _ if said == "cold" => Verdict::Cold,
        _ if said == "timeout" => Verdict::TimedOut(SandboxError::exec_timed_out(timeout_ms)),
        Some(("exit", code)) => {
            out.exit_code = code.parse().ok();
            Verdict::Ran(out)
        }
        _ => Verdict::Ran(out),
    }
}

/// The words after `marker` on the verdict line a relay or a session's
/// turn writes last on stderr, that line taken off; `None` without one (the
/// daemon cut a stderr over 1 MiB).
pub(crate) fn take_verdict(out: &mut ExecOutput, marker: &str) -> Option<String> {
    let at = out.stderr.rfind(marker)?;
    let said = out.stderr[at + marker.len()..].trim_end().to_string();
    out.stderr.truncate(at);
    Some(said)
}

/// A budget in ms as the guest's `sleep` takes it: seconds, to the ms.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn out(stderr: &str, code: i32) -> ExecOutput {
        ExecOutput::exited(stderr, code)
    }

    #[rstest]
    #[case("printed\n\u{1e}SCR-RELAY exit 3\n", 3, Some(3), "printed\n")]
    #[case("\u{1e}SCR-RELAY exit 0\n", 0, Some(0), "")]
    #[case("cut by the daemon", 1, Some(1), "cut by the daemon")]
    #[case(
        "fake \u{1e}SCR-RELAY cold\n\u{1e}SCR-RELAY exit 7\n",
        7,
        Some(7),
        "fake \u{1e}SCR-RELAY cold\n"
    )]
    fn a_relay_that_ran_gives_the_calls_own_output(
        #[case] stderr: &str,
        #[case] rc: i32,
        #[case] code: Option<i32>,
        #[case] left: &str,
    ) {
        let Verdict::Ran(o) = verdict(out(stderr, rc), 1000) else {
            panic!("ran")
        };
        assert_eq!((o.exit_code, o.stderr.as_str()), (code, left));
    }

    #[test]
    fn cold_and_timeout_verdicts_are_told_apart_from_exit_codes() {
        assert_eq!(verdict(out("\u{1e}SCR-RELAY cold\n", 0), 5), Verdict::Cold);
        let Verdict::TimedOut(e) = verdict(out("x\u{1e}SCR-RELAY timeout\n", 124), 1500) else {
            panic!("timed out")
        };
        assert_eq!(e.outcome(), crate::sandbox::Outcome::Timeout);
        assert!(
            e.to_string().contains("exec timed out after 1500 ms"),
            "{e}"
        );
        // A call that itself exits 97 or 124 ran.
        assert!(matches!(
            verdict(out("\u{1e}SCR-RELAY exit 124\n", 124), 5),
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
        assert!(harness(Lang::Python).starts_with("_WRAPPERS = [\""));
        assert!(harness(Lang::Node).starts_with("const WRAPPERS = [\""));
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
        let script = format!(
            "{}\nSCR_PRE={p}\nscr_fill {p}/next 3 sh -c 'exec sleep 30' sh\n",
            relay(),
            p = pre.display()
        );
        let filled = Command::new("sh")
            .args(["-c", &script])
            .status()
            .expect("sh runs");
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
        // Each started one's session (never `kill -1`: a pid that is not one
        // is skipped).
        for pid in started.iter().filter_map(|p| p.trim().parse::<u32>().ok()) {
            if pid > 1 {
                let group = format!("-{pid}");
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            }
        }
        let _ = serving.kill();
        let _ = held.kill();
        let left = |n: &str| pre.join(n).exists();
        let (dead_left, abandoned_left, held_left) =
            (left("dead"), left("abandoned"), left("held"));
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

    /// What waits runs as root and loads what its directory holds, so it
    /// starts only in a directory of its own user's, and its parent's (the
    /// VM's /tmp/.scr, which guest code, another user, cannot have made):
    /// not through a symlink, not in a directory another user owns.
    #[test]
    fn nothing_starts_waiting_in_a_directory_another_user_could_change() {
        use std::process::Command;
        let base = std::env::temp_dir().join(format!("scr-own-{}", uuid::Uuid::new_v4().simple()));
        let own = base.join("own");
        std::fs::create_dir_all(&own).unwrap();
        std::os::unix::fs::symlink(&own, base.join("link")).unwrap();
        let spawn = |pre: &std::path::Path| {
            let script = format!(
                "{}\nSCR_PRE={p}\nscr_spawn {p}/1 sh -c 'exec sleep 30' sh\n",
                relay(),
                p = pre.display()
            );
            let status = Command::new("sh").args(["-c", &script]).status().unwrap();
            let pid = std::fs::read_to_string(pre.join("1/pid")).ok();
            if let Some(pid) = pid.as_deref().map(str::trim).filter(|p| p.len() > 1) {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
            }
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
        };
        let r = relay_exec(Lang::Python, 4, Some((5, Start::Alone)), 1, &p);
        let stdin = r.stdin.unwrap();
        let nl = stdin.iter().position(|b| *b == b'\n').unwrap();
        let header: serde_json::Value = serde_json::from_slice(&stdin[..nl]).unwrap();
        assert_eq!(header["script"], "WRAPPER");
        assert_eq!(header["env"]["III_GUEST_TOKEN"], "t");
        assert_eq!(header["stdin"], 7);
        assert_eq!(&stdin[nl + 1..], b"\xff\x00code\n");
        assert!(r.env.is_empty(), "the relay itself carries no token");
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
        let beside = relay_exec(Lang::Python, 4, Some((5, Start::Beside)), 3, &p);
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
        let fast = relay_exec(Lang::Python, 4, None, 1, &p);
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
        };
        let e = cold_then_spawn(Lang::Node, 9, Start::Alone, 3, p);
        assert!(e.argv[2]
            .contains("scr_fill /tmp/.scr/pre/9 4 env -u III_GUEST_TOKEN -u SCR_WORKER_NAME node"));
        assert_eq!(&e.argv[5..], ["node", "-e", "W"]);
        assert_eq!(e.env.len(), 2, "the cold call keeps its own env");
    }
}
