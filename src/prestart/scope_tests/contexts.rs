//! Handler calls in fresh V8 contexts of a scope server
//! (`guest/node/realm.mjs`): what each call keeps, what falls back to a
//! thread, how a call ends, and which changes retire the server.
use super::*;

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
        // The dispatcher records the count as the server says `code`: read
        // once it has (a server that retired loses its count, and fails).
        let counted = wait_until(Duration::from_secs(20), || s.in_contexts() == before + 1);
        assert!(
            counted,
            "it ran in a context: {} after {before}",
            s.in_contexts()
        );
        assert!(s.wait_ready(s.keep()));
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

/// The dispatcher (root) reads what a server says as guest input: a
/// call that speaks on its server's channel itself (a forged end with
/// another nonce, a `ready` out of turn) gets that server killed, its
/// own call ends as a crash (never a forged success, never `cold`), and
/// the slot's next calls are served by a new server.
#[rstest::rstest]
#[case::forged_end("process.send({ say: 'code', nonce: '0'.repeat(32), code: 0 })")]
#[case::out_of_turn("process.send({ say: 'ready' })")]
fn a_call_that_speaks_for_its_server_ends_it(#[case] forge: &str) {
    let Some(s) = HostScopes::new(1, None) else {
        return;
    };
    let before = s.server_pids();
    let (v, frame) = s.call(
        &format!(
            "export async function handler() {{ {forge}; await new Promise((r) => setTimeout(r, 5000)); return 'finished' }}"
        ),
        &[],
        serde_json::json!(null),
        10_000,
    );
    let o = ran(&v);
    assert_eq!(
        o.exit_code,
        Some(137),
        "killed, not ended as it said: {o:?}"
    );
    assert_ne!(
        frame,
        crate::guest::Frame::Ok(serde_json::json!("finished"))
    );
    s.one_server_replaced(&before);
}
