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
const SCOPE_SH: &str = include_str!("../guest/prestart/scope.sh");
const NODE_SCOPE: &str = include_str!("../guest/prestart/scope.mjs");
/// A handler call in a fresh context of a scope server.
const NODE_REALM: &str = include_str!("../guest/node/realm.mjs");

/// The deadline a relay exec is sent with, past the call's own. The relay
/// enforces the call's budget itself (and kills the interpreter's session,
/// which the daemon's deadline would not reach), so the daemon's is only
/// the backstop.
const RELAY_GRACE_MS: u64 = 2_000;
/// The verdict line a relay writes last on stderr (then its key).
const VERDICT: &str = "\u{1e}SCR-RELAY ";

/// The env var that carries a verdict's key into a relay's or a session
/// turn's exec. Its root shell moves the key into an unexported variable
/// before it starts anything, so no interpreter inherits it, and a root
/// process's environment is unreadable to the guest user
/// (`/proc/<pid>/environ` is its owner's alone).
pub(crate) const VERDICT_KEY_ENV: &str = "SCR_VERDICT_KEY";

/// The secret a verdict line carries. Guest code shares the exec's stderr
/// and can print any line there, even after the verdict (from a child that
/// outlives the call), so a line is a verdict only with the key the worker
/// gave that one exec: a forged `cold` or `lost` can never make the worker
/// send a call again.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct VerdictKey(String);

impl VerdictKey {
    /// 128 random bits, for one exec.
    pub(crate) fn fresh() -> Self {
        Self(crate::guest::new_secret())
    }

    /// `p` carrying this key in its env.
    pub(crate) fn arm(&self, mut p: ExecParams) -> ExecParams {
        p.env.insert(VERDICT_KEY_ENV.to_string(), self.0.clone());
        p
    }

    /// The key as the exec's shell prints it, for tests that play the
    /// shell's part.
    #[cfg(test)]
    pub(crate) fn as_printed(&self) -> &str {
        &self.0
    }

    /// The start of this key's verdict line after `marker`.
    fn tag(&self, marker: &str) -> String {
        format!("{marker}{} ", self.0)
    }
}

impl std::fmt::Debug for VerdictKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerdictKey(<redacted>)")
    }
}

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

/// Node's scope servers' shell side, after the verdict's (scr_told) and
/// becoming the guest (scr_ids, scr_as_guest).
fn scope_sh() -> &'static str {
    static BARE: OnceLock<String> = OnceLock::new();
    BARE.get_or_init(|| {
        let as_guest = bare(crate::session::AS_GUEST_SH);
        format!("{}\n{as_guest}\n{}", relay_fork(), bare(SCOPE_SH))
    })
}

/// How calls find a fresh interpreter (the config's `prestart` and
/// `node_scopes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prestart {
    /// Every call starts its interpreter.
    Off,
    /// A pre-started process per call (python's forked off its server).
    Processes,
    /// As `Processes`, but node calls run in fresh scopes of per-slot
    /// servers (`guest/prestart/scope.mjs`).
    NodeScopes,
}

impl Prestart {
    /// What serves runs (one-shot and kept, and the pool's VMs, which
    /// wait for runs): node's pre-started processes even with scopes on. A
    /// kept runtime runs one run at a time, so a scope server's
    /// parallelism buys it nothing, and a run (not a handler call) would
    /// take a worker thread, which starts slower than a process waits.
    pub(crate) fn for_runs(self) -> Prestart {
        match self {
            Prestart::NodeScopes => Prestart::Processes,
            other => other,
        }
    }
}

/// What waits for a VM's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// Python's fork servers: one per call slot, counted by the VM table.
    PythonForks,
    /// Node interpreters that serve one call each, kept by `scr_fill`.
    NodeProcesses,
    /// Node's scope servers: one per call slot and a spare, each serving
    /// calls one at a time, each call in a fresh worker thread.
    NodeScopes,
}

impl Server {
    /// What serves `lang`'s calls under `mode` (`None`: nothing waits).
    pub(crate) fn of(lang: Lang, mode: Prestart) -> Option<Self> {
        match (mode, lang) {
            (Prestart::Off, _) => None,
            (_, Lang::Python) => Some(Self::PythonForks),
            (Prestart::Processes, Lang::Node) => Some(Self::NodeProcesses),
            (Prestart::NodeScopes, Lang::Node) => Some(Self::NodeScopes),
        }
    }

    /// Whether each call ends what served it, so that the next call needs
    /// another (node's processes); python's servers and node's scope
    /// servers serve call after call.
    pub(crate) fn spent_by_a_call(self) -> bool {
        self == Self::NodeProcesses
    }
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
fn spawn_command(server: Server, next: u64, start: Start, slots: usize, prefix: &str) -> String {
    match (server, start) {
        (Server::PythonForks, Start::Beside) => {
            format!("scr_add {} {prefix}{}", dir(next), interpreter(server))
        }
        (Server::PythonForks, Start::Alone) => {
            format!("scr_spawn {} {prefix}{}", dir(next), interpreter(server))
        }
        (Server::NodeProcesses, _) => format!(
            "scr_fill {} {} {prefix}{}",
            dir(next),
            node_interpreters(slots),
            interpreter(server)
        ),
        // The servers are counted by their slot, not by generation.
        (Server::NodeScopes, _) => format!(
            "scr_scope_fill {} {} {prefix}",
            node_interpreters(slots),
            crate::session::guest_user(Lang::Node)
        ),
    }
}

/// Node interpreters a VM with `slots` call slots keeps, waiting or busy.
pub(crate) fn node_interpreters(slots: usize) -> usize {
    slots.max(1) + 1
}

/// The interpreter command the spawner runs (the harness is `$1` of the
/// exec's shell, kept as `SCR_HARNESS`).
fn interpreter(server: Server) -> &'static str {
    match server {
        // Isolated, as every python the worker starts as root (`guest`).
        Server::PythonForks => r#"python3 -Ic "$SCR_HARNESS""#,
        // From the file the spawner writes from SCR_HARNESS (relay.sh): a
        // node relay, which starts the next one, need not carry it.
        Server::NodeProcesses => "node /tmp/.scr/pre/ready.mjs",
        // scope.sh starts it, as the guest, from the file it writes.
        Server::NodeScopes => "",
    }
}

/// The waiting interpreter's script, with the wrappers a call may run (it
/// loads their definitions ahead): a JSON array of strings is a literal in
/// both languages.
fn harness(server: Server) -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    static NODE: OnceLock<String> = OnceLock::new();
    static SCOPES: OnceLock<String> = OnceLock::new();
    let with = |wrappers: [&str; 2], assign: &str, script: &str| {
        let literal = serde_json::to_string(&wrappers).expect("strings serialize");
        format!("{assign}{literal};\n{script}")
    };
    let node = [crate::guest::NODE_RUN, crate::guest::NODE_INVOKE];
    match server {
        Server::PythonForks => PYTHON.get_or_init(|| {
            let wrappers = [crate::guest::PYTHON_RUN, crate::guest::PYTHON_INVOKE];
            with(wrappers, "_WRAPPERS = ", PYTHON_READY)
        }),
        Server::NodeProcesses => NODE.get_or_init(|| with(node, "const WRAPPERS = ", NODE_READY)),
        Server::NodeScopes => SCOPES.get_or_init(|| {
            let server = format!(
                "{}{}{NODE_REALM}{NODE_SCOPE}",
                crate::guest::NODE_SHARED,
                crate::guest::NODE_SERVING
            );
            with(node, "const WRAPPERS = ", &server)
        }),
    }
}

/// `sh -c <the server's scripts + command> sh <harness> <rest…>`.
fn shell(server: Server, command: String, rest: Vec<String>, timeout_ms: u64) -> ExecParams {
    shell_with(server, harness(server), command, rest, timeout_ms)
}

/// `sh -c <the server's scripts + command> sh <harness> <rest…>`, the
/// harness given (empty for a node relay: its spawner starts the next
/// from the file).
fn shell_with(
    server: Server,
    harness: &str,
    command: String,
    rest: Vec<String>,
    timeout_ms: u64,
) -> ExecParams {
    let scripts = match server {
        Server::NodeScopes => scope_sh(),
        Server::PythonForks | Server::NodeProcesses => relay(),
    };
    let script = format!("{scripts}\nSCR_HARNESS=$1\n{command}\n");
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
        stream: None,
    }
}

/// An exec that only starts a waiting interpreter (generation `next`) in
/// a VM no call is using (it serves one call at a time until it is a
/// namespace's, whose calls fill it up to its slots).
pub(crate) fn spawn_exec(server: Server, next: u64) -> ExecParams {
    let command = spawn_command(server, next, Start::Alone, 1, "");
    shell(server, command, Vec::new(), 30_000)
}

/// `p` as it runs today, after starting a waiting interpreter for the next
/// call. The interpreter must not inherit `p`'s env (the call's token): the
/// spawner drops each of its keys.
pub(crate) fn cold_then_spawn(
    server: Server,
    next: u64,
    start: Start,
    slots: usize,
    p: ExecParams,
) -> ExecParams {
    let unset: String = p.env.keys().map(|k| format!("-u {k} ")).collect();
    let command = format!(
        "{}; shift; exec \"$@\"",
        spawn_command(server, next, start, slots, &format!("env {unset}"))
    );
    let mut e = shell(server, command, p.argv, p.timeout_ms);
    e.stdin = p.stdin;
    e.env = p.env;
    e.workdir = p.workdir;
    e.stream = p.stream;
    e
}

/// `p` handed to the interpreter waiting in generation `using` (after
/// starting generation `next`, when the VM serves later calls: `Beside`
/// other servers, python's `using` is retired at the verdict, since the
/// spawn does not end it).
pub(crate) fn relay_exec(
    server: Server,
    using: u64,
    next: Option<(u64, Start)>,
    slots: usize,
    p: &ExecParams,
    key: &VerdictKey,
) -> ExecParams {
    let timeout_ms = p.timeout_ms.saturating_add(RELAY_GRACE_MS);
    let mut e = match server {
        // Python forks a child per call off its waiting server, which takes
        // the exec's own streams (nothing copied) and enforces the budget:
        // the relay is shell builtins only, and carries the spawner only
        // when the server is to be replaced.
        Server::PythonForks => {
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
                        spawn_command(server, n, start, slots, "")
                    );
                    shell(server, command, Vec::new(), timeout_ms)
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
        Server::NodeProcesses => {
            let mut command = format!("{}\n", relay_fork());
            if let Some((n, start)) = next {
                command.push_str(&format!(
                    "SCR_NEXT='{}'; ",
                    spawn_command(server, n, start, slots, "")
                ));
            }
            command.push_str(&format!(
                "scr_relay {} {}",
                dir(using),
                seconds(p.timeout_ms)
            ));
            shell_with(server, "", command, Vec::new(), timeout_ms)
        }
        // The dispatcher keeps the VM's scope servers, hands each call to
        // one that waits (the exec's own streams, nothing copied) and
        // keeps the budget: the relay is shell builtins and one `rm`, and
        // carries neither harness nor spawner (the dispatcher replaces a
        // server that ends; a relay that finds no dispatcher says `cold`,
        // and the cold run's fill starts one).
        Server::NodeScopes => {
            let command = format!("scr_scope {} {}", node_interpreters(slots), p.timeout_ms);
            shell_with(server, "", command, Vec::new(), timeout_ms)
        }
    };
    e.stdin = Some(request(p));
    e.stream = p.stream.clone();
    key.arm(e)
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

/// Reads the relay's verdict (the line with `key`) off its stderr. Without
/// one (the daemon cut a stderr over 1 MiB, or the exec was killed) the
/// call ran: a call is never run twice.
pub(crate) fn verdict(mut out: ExecOutput, timeout_ms: u64, key: &VerdictKey) -> Verdict {
    let Some(said) = take_verdict(&mut out, VERDICT, key) else {
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

/// The words after `marker` and `key` on the verdict line a relay or a
/// session's turn writes on stderr, that line taken off (what guest code
/// wrote after it stays); `None` without one (the daemon cut a stderr over
/// 1 MiB). A line without the key is guest output like any other.
pub(crate) fn take_verdict(out: &mut ExecOutput, marker: &str, key: &VerdictKey) -> Option<String> {
    let tag = key.tag(marker);
    let at = out.stderr.rfind(&tag)?;
    let rest = &out.stderr[at + tag.len()..];
    let end = rest.find('\n').unwrap_or(rest.len());
    let said = rest[..end].trim_end().to_string();
    let after = rest.get(end + 1..).unwrap_or_default().to_string();
    out.stderr.truncate(at);
    out.stderr.push_str(&after);
    Some(said)
}

/// A budget in ms as the guest's `sleep` takes it: seconds, to the ms.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `script` prints `marker` (then the key and `words`, printf's format) as
/// its verdict line, and reads the key from the variable the worker sets,
/// then unsets it: one spelling on both sides (guest/PROTOCOL.md,
/// "Markers"). For the relay's and the session turn's tests.
#[cfg(test)]
pub(crate) fn assert_keyed_verdict(script: &str, marker: &str, words: &str) {
    let shell = marker.replace('\u{1e}', "\\036");
    assert!(
        script.contains(&format!("printf '{shell}{words}\\n'")),
        "the script prints {shell:?}"
    );
    assert!(script.contains(&format!("scr_key=${{{VERDICT_KEY_ENV}:-}}")));
    assert!(script.contains(&format!("unset {VERDICT_KEY_ENV}")));
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod scope_tests;
