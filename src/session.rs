//! Sessions, the guest side as the worker speaks it: the exec of one run
//! into a session (a kept runtime whose interpreter keeps its globals), and
//! what its verdict means. Whether a runtime has one, and whether its
//! interpreter is believed alive, is the runtime's (`runtime/session`).
//!
//! A session's interpreter runs as the guest user in its own session in the
//! VM and serves every run of its runtime in one process, one at a time
//! (the runtime's one slot serializes them). A run hands it the exec's
//! streams as a pre-started interpreter's relay does, so nothing is copied:
//! see `guest/session/turn.sh` for the protocol. The harness (the
//! interpreter's script) travels only when no interpreter is believed
//! alive; a run that finds none without it ends `gone` (root's finding,
//! before anything is handed) and is sent again with it. Nothing else
//! sends a run again: the verdict is root's line with the exec's key, and
//! what the guest half reports can at most misstate the guest's own run.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::guest::{NODE_RUN, PYTHON_RUN};
use crate::ids::Lang;
use crate::prestart::{bare, request, seconds, take_verdict, VerdictKey};
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

const TURN_SH: &str = include_str!("../guest/session/turn.sh");
/// Becoming the guest user, shared with node's scope servers.
pub(crate) const AS_GUEST_SH: &str = include_str!("../guest/as_guest.sh");
const PYTHON_SESSION: &str = include_str!("../guest/session/session.py");
const NODE_SESSION: &str = include_str!("../guest/session/session.mjs");

/// The verdict line a turn writes last on stderr.
const VERDICT: &str = "\u{1e}SCR-SESSION ";

/// The deadline a turn's exec is sent with, past the run's own. The turn
/// enforces the run's budget itself (and kills the interpreter's session,
/// which the exec's deadline would not reach); this is the backstop, with
/// room for an interpreter to start.
const TURN_GRACE_MS: u64 = 5_000;

fn turn_script() -> &'static str {
    static BARE: OnceLock<String> = OnceLock::new();
    BARE.get_or_init(|| format!("{}\n{}", bare(AS_GUEST_SH), bare(TURN_SH)))
}

/// The session interpreter's script: the run wrapper's definitions (all but
/// the cold start's last line) and the session's loop.
fn harness(lang: Lang) -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    static NODE: OnceLock<String> = OnceLock::new();
    let join = |wrapper: &str, tail: &str, session: &str| {
        let head = wrapper
            .trim_end()
            .strip_suffix(tail)
            .expect("the run wrapper ends with its cold start");
        format!("{head}\n{session}")
    };
    match lang {
        Lang::Python => PYTHON.get_or_init(|| join(PYTHON_RUN, "_main()", PYTHON_SESSION)),
        Lang::Node => NODE.get_or_init(|| {
            let session = format!("{}{NODE_SESSION}", crate::guest::NODE_SERVING);
            join(NODE_RUN, "await main();", &session)
        }),
    }
}

/// The guest user a language's image runs guest code as (the wrappers'
/// default, which `SCR_GUEST_USER` in the VM overrides there too).
pub(crate) fn guest_user(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "1000:100",
        Lang::Node => "1000:1000",
    }
}

/// The exec of run `p` (a run wrapper's exec: its env and its code on
/// stdin) as a turn of `lang`'s session; `start` carries the harness, so a
/// turn that finds no interpreter starts one.
pub(crate) fn turn_exec(lang: Lang, p: &ExecParams, start: bool, key: &VerdictKey) -> ExecParams {
    let mut argv: Vec<String> = ["sh", "-c", "eval \"$SCR_TURN\"", "sh", "root"]
        .into_iter()
        .map(String::from)
        .collect();
    argv.extend([
        guest_user(lang).to_string(),
        seconds(p.timeout_ms),
        lang.as_str().to_string(),
    ]);
    if start {
        argv.push(harness(lang).to_string());
    }
    key.arm(ExecParams {
        argv,
        stdin: Some(request(p)),
        env: BTreeMap::from([("SCR_TURN".to_string(), turn_script().to_string())]),
        timeout_ms: p.timeout_ms.saturating_add(TURN_GRACE_MS),
        workdir: p.workdir.clone(),
        stream: p.stream.clone(),
    })
}

/// Whether a turn found its interpreter or started one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interpreter {
    Started,
    Found,
}

/// What a turn's exec came to.
#[derive(Debug, PartialEq)]
pub(crate) enum Turn {
    /// The run ran; its output as a cold exec would have given it.
    Ran(Interpreter, ExecOutput),
    /// Root found no live interpreter and no harness came: nothing was
    /// handed, so the run may be sent again, with the harness.
    Gone,
    /// The run was handed and no interpreter says it took it (the one
    /// started died at boot, its errors on stderr, or the one found died
    /// meanwhile). Never sent again: only guest processes saw it.
    Lost(Interpreter, String),
    /// The budget passed; the interpreter went with the run.
    TimedOut(SandboxError),
}

/// Reads a turn's verdict (root's line with `key`) off its stderr. Without
/// one (the daemon cut a stderr over 1 MiB) the run ran in the interpreter
/// it found: a run is never run twice.
pub(crate) fn verdict(mut out: ExecOutput, timeout_ms: u64, key: &VerdictKey) -> Turn {
    let Some(said) = take_verdict(&mut out, VERDICT, key) else {
        return Turn::Ran(Interpreter::Found, out);
    };
    let (which, what) = said.split_once(' ').unwrap_or((said.as_str(), ""));
    let interpreter = match which {
        "new" => Interpreter::Started,
        _ => Interpreter::Found,
    };
    match what.split_once(' ') {
        _ if what == "gone" => Turn::Gone,
        _ if what == "lost" => Turn::Lost(interpreter, out.stderr),
        _ if what == "timeout" => Turn::TimedOut(SandboxError::exec_timed_out(timeout_ms)),
        Some(("exit", code)) => {
            out.exit_code = code.parse().ok();
            Turn::Ran(interpreter, out)
        }
        _ => Turn::Ran(interpreter, out),
    }
}

#[cfg(test)]
mod tests;
