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
    s.one_server_replaced(&before);
}

impl HostScopes {
    /// Exactly one of the servers `before` was replaced, a new one took its
    /// place, and every slot serves the next calls.
    fn one_server_replaced(&self, before: &[String]) {
        assert!(self.wait_ready(self.keep()), "a new server took its place");
        let after = self.server_pids();
        assert_eq!(
            before.iter().filter(|p| !after.contains(p)).count(),
            1,
            "one server was replaced: {before:?} → {after:?}"
        );
        for _ in 0..self.keep() {
            assert_eq!(self.run("return 2", 10_000).1.as_deref(), Some("2"));
        }
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

mod contexts;
