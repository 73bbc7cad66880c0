//! Node's scope servers (`guest/prestart/scope.{sh,mjs}`), run on this
//! host as a VM runs them: root fills and relays, the servers and the calls
//! run as the guest user, in a directory of the test's own. What a call
//! must keep from "a fresh process each" (issue 43, docs/contract.md): its
//! own globals, env, listeners, output, exit code and deadline.
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use crate::host_run::{end_session, exec_here, skipped, wait_until};

/// One VM's scope servers: `slots` call slots, so one server more.
struct HostScopes {
    base: std::path::PathBuf,
    slots: usize,
    /// The heap bound each scope gets (`SCR_SCOPE_HEAP_MB`), if not the
    /// VM's share.
    heap_mb: Option<u32>,
}

impl HostScopes {
    fn new(slots: usize, heap_mb: Option<u32>) -> Option<HostScopes> {
        use std::os::unix::fs::MetadataExt;
        let base =
            std::env::temp_dir().join(format!("scr-scopes-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&base).unwrap();
        if std::fs::metadata(&base).unwrap().uid() != 0 {
            let _ = std::fs::remove_dir_all(&base);
            skipped("scope servers are started by root as the guest user; run as root");
            return None;
        }
        if Command::new("node").args(["-e", "0"]).status().is_err() {
            let _ = std::fs::remove_dir_all(&base);
            skipped("node is not on PATH");
            return None;
        }
        let s = HostScopes {
            base,
            slots,
            heap_mb,
        };
        let (o, _) = s.exec(&s.fill());
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        assert!(
            s.wait_ready(s.keep()),
            "every server waits with a scope ready"
        );
        Some(s)
    }

    /// The exec that keeps `keep` servers live.
    fn fill(&self) -> ExecParams {
        shell(
            Server::NodeScopes,
            spawn_command(Server::NodeScopes, 0, Start::Alone, self.slots, ""),
            Vec::new(),
            30_000,
        )
    }

    fn keep(&self) -> usize {
        node_interpreters(self.slots)
    }

    fn dir(&self) -> std::path::PathBuf {
        self.base.join(".scr").join("scope")
    }

    /// `e` as the VM runs it, and how long it took.
    fn exec(&self, e: &ExecParams) -> (ExecOutput, Duration) {
        let began = Instant::now();
        let mut env = vec![("SCR_SCOPES", self.dir().display().to_string())];
        if let Some(mb) = self.heap_mb {
            env.push(("SCR_SCOPE_HEAP_MB", mb.to_string()));
        }
        let o = exec_here(e, &env);
        (o, began.elapsed())
    }

    /// The exec `p` relayed to a server, as the worker relays a call: its
    /// verdict and how long it took.
    fn relay(&self, p: &ExecParams) -> (Verdict, Duration) {
        let key = VerdictKey::fresh();
        let (o, took) = self.exec(&relay_exec(
            Server::NodeScopes,
            0,
            None,
            self.slots,
            p,
            &key,
        ));
        (verdict(o, p.timeout_ms, &key), took)
    }

    /// `code` as a run of the node wrapper, relayed to a server: its
    /// verdict, its output (the result frame taken off) and how long it
    /// took.
    fn run(&self, code: &str, timeout_ms: u64) -> (Verdict, Option<String>, Duration) {
        let p = crate::guest::run_exec_with_result(Lang::Node, code, timeout_ms, "sec", 4096);
        let (v, took) = self.relay(&p);
        let value = match &v {
            Verdict::Ran(o) => match crate::run_result::take(&o.stdout, "sec").1 {
                Some(crate::run_result::Completion::Value(v)) => Some(v.to_string()),
                _ => None,
            },
            _ => None,
        };
        (v, value, took)
    }

    /// A handler module `source` (with `siblings`, name → text, beside
    /// it) called once with `payload` through a server, as the worker
    /// calls a registered function: its verdict and its frame.
    fn call(
        &self,
        source: &str,
        siblings: &[(&str, &str)],
        payload: serde_json::Value,
        timeout_ms: u64,
    ) -> (Verdict, crate::guest::Frame) {
        let dir = self.base.join("fn");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in siblings {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let module = dir.join("f.mjs");
        std::fs::write(&module, source).unwrap();
        let secret = "0123456789abcdef0123456789abcdef";
        let p = crate::guest::invoke_exec(
            Lang::Node,
            "t::f",
            &module.display().to_string(),
            crate::guest::InvokeMode::Call,
            &payload,
            secret,
            timeout_ms,
        );
        let (v, _) = self.relay(&p);
        let frame = match &v {
            Verdict::Ran(o) => crate::guest::parse_frame(&o.stdout, secret),
            _ => crate::guest::Frame::Missing,
        };
        (v, frame)
    }

    /// Calls the servers ran in a fresh context, summed.
    fn in_contexts(&self) -> usize {
        std::fs::read_to_string(self.dir().join("servers"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(3)?.parse::<usize>().ok())
            .sum()
    }

    /// Until `n` servers wait with a fresh scope (deadline 20 s).
    fn wait_ready(&self, n: usize) -> bool {
        wait_until(Duration::from_secs(20), || {
            self.servers().iter().filter(|(_, s)| s == "ready").count() >= n
        })
    }

    /// Each server's pid and state, as the dispatcher last wrote them.
    fn servers(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.dir().join("servers"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut words = l.split(' ');
                Some((words.next()?.to_string(), words.next()?.to_string()))
            })
            .collect()
    }

    /// The servers' pids, sorted.
    fn server_pids(&self) -> Vec<String> {
        let mut pids: Vec<String> = self.servers().into_iter().map(|(p, _)| p).collect();
        pids.sort();
        pids
    }

    fn dispatcher(&self) -> String {
        std::fs::read_to_string(self.dir().join("pid"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

impl Drop for HostScopes {
    fn drop(&mut self) {
        end_session(&self.dispatcher());
        for pid in self.server_pids() {
            end_session(&pid);
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn ran(v: &Verdict) -> &ExecOutput {
    match v {
        Verdict::Ran(o) => o,
        other => panic!("the call ran: {other:?}"),
    }
}

/// Whatever a call leaves in its process-wide state (a global, a
/// builtin's prototype, an env var, an exit listener, an exit code), the
/// next call on the same server (the same process) sees none of it; each
/// call's output and exit code are its own, and what it starts with
/// inherited stdio writes to its output.
#[test]
fn each_call_starts_from_a_fresh_scope() {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let dirty = "globalThis.leak = 1; process.env.LEAK = '1'; \
        process.on('exit', () => console.log('listener of an earlier call')); \
        Array.prototype.leak = 1; process.exitCode = 3; return process.pid";
    let look = "const { execSync } = await import('node:child_process');\n\
        execSync('echo from-a-child', { stdio: 'inherit' });\n\
        console.error('err line');\n\
        const seen = [typeof globalThis.leak, process.env.LEAK ?? null, [].leak ?? null, process.exitCode ?? null];\n\
        console.log(JSON.stringify(seen));\n\
        return process.pid;";
    for _ in 0..3 {
        // Every server waiting, a relay takes the first: both calls of a
        // round go to the same server.
        assert!(s.wait_ready(s.keep()));
        let (v, dirtied, _) = s.run(dirty, 10_000);
        let o = ran(&v);
        assert_eq!(o.exit_code, Some(3), "{o:?}");
        assert!(
            o.stdout.contains("listener of an earlier call"),
            "its own listener ran: {o:?}"
        );
        assert!(s.wait_ready(s.keep()));
        let (v, looked, _) = s.run(look, 10_000);
        let o = ran(&v);
        assert_eq!(looked, dirtied, "the same server's process ran both");
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        assert_eq!(
            crate::run_result::take(&o.stdout, "sec").0,
            "from-a-child\n[\"undefined\",null,null,null]\n",
            "{o:?}"
        );
        assert_eq!(o.stderr, "err line\n");
    }
}

/// A call that spins is ended at its budget, alone: a call on another
/// slot answers meanwhile, and the next calls find a server again.
#[test]
fn a_spinning_call_ends_at_its_budget_and_delays_no_other() {
    let Some(s) = HostScopes::new(2, None) else {
        return;
    };
    let (spun, quick) = std::thread::scope(|t| {
        let spin = t.spawn(|| s.run("console.log('spinning'); for (;;) {}", 1_500));
        // Once the spinner's relay claimed its server.
        let claimed = |k: usize| s.dir().join(format!("{k}.claim")).exists();
        assert!(
            wait_until(Duration::from_secs(5), || (0..s.keep()).any(claimed)),
            "the spinner claimed a server"
        );
        let quick = s.run("return 6 * 7", 10_000);
        (spin.join().unwrap(), quick)
    });
    assert!(matches!(spun.0, Verdict::TimedOut(_)), "{:?}", spun.0);
    assert!(
        spun.2 < Duration::from_secs(5),
        "ended at its budget: {:?}",
        spun.2
    );
    assert_eq!(quick.1.as_deref(), Some("42"), "{:?}", quick.0);
    assert!(
        quick.2 < Duration::from_millis(1_200),
        "the other call did not wait for the spinner: {:?}",
        quick.2
    );
    assert!(
        s.wait_ready(s.keep()),
        "the spinner's server was started again"
    );
    for _ in 0..s.keep() {
        assert_eq!(s.run("return 1", 10_000).1.as_deref(), Some("1"));
    }
}

/// A call that takes its whole server down costs only that call: it ran
/// (never `cold`: it is not sent again), a new server takes the slot, and
/// the next calls are served. (`process.abort()` is not one: a worker
/// thread may not call it, and the call only fails.)
#[rstest::rstest]
#[case("process.kill(process.pid, 'SIGABRT')")]
#[case("process.kill(process.pid, 'SIGKILL')")]
fn a_call_that_ends_its_server_costs_only_itself(#[case] code: &str) {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let before = s.server_pids();
    let (v, _, _) = s.run(code, 10_000);
    let o = ran(&v);
    assert_ne!(o.exit_code, Some(0), "{o:?}");
    assert!(s.wait_ready(s.keep()), "a new server took its place");
    let after = s.server_pids();
    assert_eq!(
        before.iter().filter(|p| !after.contains(p)).count(),
        1,
        "one server was replaced: {before:?} → {after:?}"
    );
    for _ in 0..s.keep() {
        assert_eq!(s.run("return 2", 10_000).1.as_deref(), Some("2"));
    }
}

/// A scope's heap is bounded: a call past it ends alone (exit 1, and why),
/// its server serves the next call.
#[test]
fn a_scopes_heap_is_bounded_and_released() {
    let Some(s) = HostScopes::new(1, Some(64)) else {
        return;
    };
    let hog = "const a = []; for (;;) a.push(new Array(1e5).fill({ x: 1 }))";
    let (v, _, _) = s.run(hog, 20_000);
    let o = ran(&v);
    assert_eq!(o.exit_code, Some(1), "{o:?}");
    assert!(o.stderr.contains("64 MB"), "it says why: {o:?}");
    let before = s.server_pids();
    for _ in 0..s.keep() {
        assert_eq!(s.run("return 3", 10_000).1.as_deref(), Some("3"));
    }
    assert_eq!(s.server_pids(), before, "the same servers serve on");
}

/// Nothing waits for a call when no dispatcher lives: the relay says
/// `cold` (nothing ran) before it hands anything.
#[test]
fn a_relay_with_no_dispatcher_says_cold() {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let dispatcher = s.dispatcher();
    end_session(&dispatcher);
    let fd3 = format!("/proc/{dispatcher}/fd/3");
    assert!(
        wait_until(Duration::from_secs(5), || !std::path::Path::new(&fd3)
            .exists()),
        "the dispatcher ended"
    );
    let (v, _, _) = s.run("return 1", 10_000);
    assert_eq!(v, Verdict::Cold);
}

/// A fill never touches a server that lives, busy or not: a call being
/// served when the next fill runs answers, from the same server.
#[test]
fn a_fill_leaves_live_servers_alone() {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let before = (s.dispatcher(), s.server_pids());
    let (slow, filled) = std::thread::scope(|t| {
        let slow = t.spawn(|| {
            s.run(
                "await new Promise((r) => setTimeout(r, 1500)); return 'slow'",
                10_000,
            )
        });
        let claimed = |k: usize| s.dir().join(format!("{k}.claim")).exists();
        assert!(
            wait_until(Duration::from_secs(5), || (0..s.keep()).any(claimed)),
            "the slow call claimed a server"
        );
        let (filled, _) = s.exec(&s.fill());
        (slow.join().unwrap(), filled)
    });
    assert_eq!(filled.exit_code, Some(0), "{filled:?}");
    assert_eq!(slow.1.as_deref(), Some("\"slow\""), "{:?}", slow.0);
    assert_eq!(
        (s.dispatcher(), s.server_pids()),
        before,
        "no server was started again"
    );
}

/// A relay hands a call to the dispatcher as soon as its pid is written,
/// and a line written to a FIFO nobody holds is dropped when its writer
/// closes it. So the dispatcher holds `in` (fd 3) from before its pid is
/// there: checked right after each of 10 starts, by the shell that
/// started it.
#[test]
fn the_dispatcher_holds_in_before_its_pid_is_written() {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let check = format!(
        "scr_ids {user} && scr_as_guest || exit 1\nkeep=2\ni=0\nwhile [ $i -lt 10 ]; do\n  scr_start\n  read -r q <\"$SCR_SCOPES/pid\"\n  [ /proc/$q/fd/3 -ef \"$SCR_SCOPES/in\" ] || echo \"late $i\"\n  i=$((i + 1))\ndone",
        user = crate::session::guest_user(Lang::Node)
    );
    let (o, _) = s.exec(&shell(Server::NodeScopes, check, Vec::new(), 30_000));
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert!(
        o.stdout.is_empty(),
        "`in` opened after the pid: {}",
        o.stdout
    );
}

/// A handler call runs in a fresh context of a server (not a thread, not
/// a process): module state (its own and a sibling's), globals, env,
/// listeners and the context's own prototypes read as new in every call,
/// on the same server process; node's builtins import as they do in a
/// process of its own, and what the handler prints goes to stderr.
#[test]
fn handler_calls_run_in_fresh_contexts_of_one_server() {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let sibling = "let n = 0; export function bump() { n += 1; return n; }";
    let source = "import { bump } from './count.mjs';\n\
        import fs, { existsSync } from 'node:fs';\n\
        import { join } from 'path';\n\
        let calls = 0;\n\
        export async function handler(p) {\n\
          calls += 1;\n\
          globalThis.seen = (globalThis.seen ?? 0) + 1;\n\
          process.env.SEEN = String(Number(process.env.SEEN ?? 0) + 1);\n\
          Array.prototype.seen = (Array.prototype.seen ?? 0) + 1;\n\
          process.on('exit', () => console.log('exit listener'));\n\
          process.exitCode = 3;\n\
          await new Promise((r) => setTimeout(r, 20));\n\
          console.log('printed');\n\
          return { calls, seen: globalThis.seen, env: process.env.SEEN, proto: [].seen,\n\
            sibling: bump(), fs: typeof fs.readFileSync === 'function' && existsSync(join('/', 'tmp')),\n\
            pid: process.pid, p };\n\
        }\n";
    let mut pids = Vec::new();
    for i in 0..3 {
        assert!(s.wait_ready(s.keep()));
        let before = s.in_contexts();
        let (v, frame) = s.call(
            source,
            &[("count.mjs", sibling)],
            serde_json::json!(i),
            10_000,
        );
        let o = ran(&v);
        let crate::guest::Frame::Ok(value) = frame else {
            panic!("the handler answered: {o:?}");
        };
        assert_eq!(
            value,
            serde_json::json!({"calls": 1, "seen": 1, "env": "1", "proto": 1, "sibling": 1,
                "fs": true, "pid": value["pid"], "p": i}),
            "{o:?}"
        );
        assert_eq!(o.stderr, "printed\nexit listener\n", "{o:?}");
        assert!(s.wait_ready(s.keep()));
        assert_eq!(s.in_contexts(), before + 1, "it ran in a context");
        pids.push(value["pid"].clone());
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "one server ran them all: {pids:?}"
    );
}

/// What a context cannot give as a process would (a package, CommonJS, a
/// dynamic import) runs the call in a thread instead, decided before the
/// code ran: it answers once, as node answers it.
#[rstest::rstest]
#[case::create_require(
    "import { createRequire } from 'node:module';\n\
     const require = createRequire(import.meta.url);\n\
     export function handler() { globalThis.ran = (globalThis.ran ?? 0) + 1; return [require('node:path').sep, globalThis.ran]; }"
)]
#[case::dynamic_import(
    "export async function handler() { globalThis.ran = (globalThis.ran ?? 0) + 1; return [(await import('node:path')).sep, globalThis.ran]; }"
)]
#[case::common_js(
    "module.exports.handler = () => { globalThis.ran = (globalThis.ran ?? 0) + 1; return [require('path').sep, globalThis.ran]; };"
)]
fn what_a_context_cannot_load_runs_in_a_thread(#[case] source: &str) {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    for _ in 0..2 {
        assert!(s.wait_ready(s.keep()));
        let before = s.in_contexts();
        let (v, frame) = s.call(source, &[], serde_json::json!(null), 10_000);
        assert_eq!(
            frame,
            crate::guest::Frame::Ok(serde_json::json!(["/", 1])),
            "{v:?}"
        );
        assert!(s.wait_ready(s.keep()));
        assert_eq!(s.in_contexts(), before, "a thread ran it");
    }
}

/// How a handler call in a context ends, each as the wrapper in a process
/// of its own reports it (docs/contract.md: register_function).
#[rstest::rstest]
#[case::throws(
    "export function handler() { throw new TypeError('nope') }",
    "throw",
    "TypeError: nope"
)]
#[case::exits(
    "export function handler() { process.exit(3); return 1 }",
    "throw",
    "the handler called process.exit(3) before returning a value"
)]
#[case::never_settles(
    "export function handler() { return new Promise(() => {}) }",
    "throw",
    "the handler's promise never settled"
)]
#[case::not_json(
    "export function handler() { return 1n }",
    "not_json",
    "not JSON-serializable"
)]
#[case::no_handler("export const x = 1", "no_handler", "exports no handler")]
#[case::throws_at_load(
    "throw new RangeError('at load'); export function handler() {}",
    "load_error",
    "RangeError: at load"
)]
#[case::throws_later(
    "export function handler() { setTimeout(() => { throw new Error('later') }, 5); return new Promise(() => {}) }",
    "throw",
    "never settled"
)]
fn a_handler_call_in_a_context_ends_as_in_a_process(
    #[case] source: &str,
    #[case] kind: &str,
    #[case] says: &str,
) {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let (v, frame) = s.call(source, &[], serde_json::json!(null), 10_000);
    let crate::guest::Frame::Err { kind: got, message } = frame else {
        panic!("an error frame: {v:?}");
    };
    assert_eq!(
        format!("{got:?}"),
        format!("{:?}", error_kind(kind)),
        "{message} {v:?}"
    );
    assert!(message.contains(says), "{message}");
    // The server serves on (or another took its place).
    assert!(s.wait_ready(s.keep()));
    let (_, next) = s.call(
        "export const handler = () => 5",
        &[],
        serde_json::json!(null),
        10_000,
    );
    assert_eq!(next, crate::guest::Frame::Ok(serde_json::json!(5)));
}

fn error_kind(kind: &str) -> crate::guest::FrameError {
    use crate::guest::FrameError::*;
    match kind {
        "not_json" => NotJson,
        "no_handler" => NoHandler,
        "load_error" => LoadError,
        _ => Throw,
    }
}

/// A call that changes what the server shares with later calls (a node
/// object's prototype, its working directory, a timer it leaves) cannot
/// leave it to them: its server retires after it, and the next call
/// sees none of it.
#[rstest::rstest]
#[case::buffer_prototype("Buffer.prototype.left = 1", "typeof Buffer.prototype.left")]
#[case::builtin_export("path.left = 1", "typeof path.left")]
#[case::working_directory("process.chdir('/')", "process.cwd() === '/' ? 'object' : 'undefined'")]
#[case::host_global(
    "Buffer.constructor('globalThis.left = 1')()",
    "typeof Buffer.constructor('return globalThis.left')()"
)]
fn a_call_that_changes_its_server_retires_it(#[case] change: &str, #[case] look: &str) {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let module = |body: &str| {
        format!("import path from 'node:path';\nexport async function handler() {{ {body}; return process.pid }}")
    };
    let (_, first) = s.call(&module(change), &[], serde_json::json!(null), 10_000);
    let crate::guest::Frame::Ok(changed_by) = first else {
        panic!("the change ran: {first:?}");
    };
    assert!(s.wait_ready(s.keep()));
    for _ in 0..s.keep() {
        let (v, seen) = s.call(
            &format!("import path from 'node:path';\nexport async function handler() {{ return [{look}, process.pid] }}"),
            &[],
            serde_json::json!(null),
            10_000,
        );
        let crate::guest::Frame::Ok(seen) = seen else {
            panic!("it answered: {v:?}");
        };
        assert_eq!(seen[0], "undefined", "{seen}");
        assert_ne!(seen[1], changed_by, "the changed server served no more");
        assert!(s.wait_ready(s.keep()));
    }
}

/// A call that answers at once and leaves nothing keeps its server: back
/// to back, the same servers serve every call in a context (a server
/// retired per call would cost a process start each, the cost contexts
/// are there to save).
#[test]
fn calls_that_leave_nothing_keep_their_servers() {
    let Some(s) = HostScopes::new(2, None) else {
        return;
    };
    let before = (s.server_pids(), s.in_contexts());
    for i in 0..6 {
        let (v, frame) = s.call(
            "export function handler(payload) { return payload }",
            &[],
            serde_json::json!({ "i": i }),
            10_000,
        );
        assert_eq!(
            frame,
            crate::guest::Frame::Ok(serde_json::json!({ "i": i })),
            "{v:?}"
        );
        assert!(s.wait_ready(s.keep()));
    }
    assert_eq!((s.server_pids(), s.in_contexts()), (before.0, before.1 + 6));
}
