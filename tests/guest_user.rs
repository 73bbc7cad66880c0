//! Guest code never runs as root in the VM (issue 30, finding 5: a guest
//! that is root writes the image's shared rootfs, which every later VM of
//! the image runs). In a one-shot run, the runs of a kept runtime and a
//! published handler's calls, in python and node, cold and pre-started,
//! the process that runs the guest's code is the image's user (uid 1000,
//! real, effective and saved; `whoami` names it), with no way back to root.
//! Skipped, saying why, where the daemon double cannot give its sandboxes
//! that user (`users::unmodelled`).

mod common;

use common::Harness;
use serde_json::{json, Value};

const REGISTER: &str = "sandbox-code-runner::register_function";
const TEARDOWN: &str = "sandbox-code-runner::teardown";

/// What the guest is, as one line: `<Uid:> <Gid:> <Groups:> of
/// /proc/self/status|whoami|pre-started|root again?|the waiting
/// interpreters' directory (root's alone: a guest cannot open another
/// call's FIFOs, guest/PROTOCOL.md)`. A pre-started
/// process's command line ends with its directory under /tmp/.scr/pre
/// (python's fork server, whose child it is, or the node interpreter), or
/// names node's scope server (`/tmp/.scr/scope/scope.mjs`, whose calls a
/// namespace runtime's are); a cold one's ends with the wrapper.
const PYTHON: &str = r#"import os, re, subprocess
s = open('/proc/self/status').read()
ids = ' '.join(' '.join(re.search('^%s:(.*)$' % k, s, re.M).group(1).split()) for k in ('Uid', 'Gid', 'Groups')).strip()
who = subprocess.run(['whoami'], capture_output=True, text=True).stdout.strip()
pre = open('/proc/self/cmdline', 'rb').read().split(b'\0')[-2].startswith(b'/tmp/.scr/pre/')
try:
    os.setuid(0)
    back = 'root again'
except PermissionError:
    back = 'stays'
try:
    os.listdir('/tmp/.scr/pre')
    pre_dir = 'open'
except (PermissionError, FileNotFoundError):
    pre_dir = 'closed'
print('%s|%s|%s|%s|%s' % (ids, who, pre, back, pre_dir))
"#;

const NODE: &str = r#"import fs from 'node:fs';
import { execFileSync } from 'node:child_process';
const s = fs.readFileSync('/proc/self/status', 'utf8');
const ids = ['Uid', 'Gid', 'Groups'].map((k) => s.match(new RegExp(`^${k}:(.*)$`, 'm'))[1].trim().split(/\s+/).join(' ')).join(' ').trim();
const who = execFileSync('whoami', { encoding: 'utf8' }).trim();
const argv = fs.readFileSync('/proc/self/cmdline', 'utf8').split('\0');
const pre = argv[argv.length - 2].startsWith('/tmp/.scr/pre/') || argv.includes('/tmp/.scr/scope/scope.mjs') ? 'True' : 'False';
let back = 'stays';
try { process.setuid(0); back = 'root again'; } catch { /* stays */ }
let preDir = 'open';
try { fs.readdirSync('/tmp/.scr/pre'); } catch (e) { if (['EACCES', 'ENOENT'].includes(e.code)) preDir = 'closed'; }
console.log(`${ids}|${who}|${pre}|${back}|${preDir}`);
"#;

/// The line a guest of `lang` prints, `pre`-started or not.
fn expected(lang: &str, pre: bool) -> String {
    let (ids, who) = match lang {
        // python-user: uid 1000, group 100 (users); no supplementary group.
        "python" => ("1000 1000 1000 1000 100 100 100 100", "python-user"),
        _ => ("1000 1000 1000 1000 1000 1000 1000 1000", "node"),
    };
    let pre = if pre { "True" } else { "False" };
    format!("{ids}|{who}|{pre}|stays|closed\n")
}

fn code(lang: &str) -> &'static str {
    if lang == "python" {
        PYTHON
    } else {
        NODE
    }
}

/// A handler whose value is that line.
fn handler(lang: &str) -> String {
    match lang {
        "python" => {
            let body: String = PYTHON
                .replace("print(", "return (")
                .lines()
                .map(|l| format!("    {l}\n"))
                .collect();
            format!("def handler(payload):\n{body}")
        }
        _ => {
            let (imports, body) = NODE.split_at(NODE.find("const s").expect("body"));
            format!(
                "{imports}export function handler() {{\n{}\n}}\n",
                body.replace("console.log(", "return (")
            )
        }
    }
}

fn stdout(out: &Value) -> &str {
    out["stdout"].as_str().unwrap_or_default()
}

/// The calls after a runtime's first, each a fresh process that must be
/// the image's user. Without `prestart` every one is cold. With it, the
/// next interpreter may still be starting when a call arrives (the relay
/// then goes cold, by design), so calls are made until one was served by a
/// pre-started interpreter, at most 20: each line is the user's, cold or
/// pre-started, and at least one is pre-started.
async fn later_calls<F, Fut>(lang: &str, prestart: bool, what: &str, call: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let (cold, warm) = (expected(lang, false), expected(lang, true));
    if !prestart {
        for n in 0..2 {
            assert_eq!(call().await, cold, "{what} {n}");
        }
        return;
    }
    for n in 0..20 {
        let line = call().await;
        assert!(line == cold || line == warm, "{what} {n}: {line}");
        if line == warm {
            return;
        }
    }
    panic!("{what}: 20 calls and none served by a pre-started interpreter");
}

/// Every path a guest's code takes, for one language, with or without
/// pre-started interpreters.
async fn every_path(lang: &str, prestart: bool) {
    let config = if prestart { "" } else { "prestart: false\n" };
    let h = Harness::start(config).await;
    if let Some(why) = code_runner_conformance::standin::sandbox_double::users::unmodelled() {
        common::skip(why);
        h.finish(0).await;
        return;
    }
    let case = format!("{lang}, prestart {prestart}");
    // One-shot: always cold (it starts nothing).
    let out = h
        .run(json!({"lang": lang, "code": code(lang)}))
        .await
        .unwrap();
    assert_eq!(
        stdout(&out),
        expected(lang, false),
        "one-shot, {case}: {out}"
    );

    // A kept runtime: the first run is cold (and starts what waits), the
    // next ones are relayed into what waits.
    let out = h
        .run(json!({"lang": lang, "code": code(lang), "keep": true}))
        .await
        .unwrap();
    assert_eq!(
        stdout(&out),
        expected(lang, false),
        "first kept run, {case}: {out}"
    );
    let rid = out["runtime_id"]
        .as_str()
        .expect("a runtime id")
        .to_string();
    later_calls(lang, prestart, &format!("kept run, {case}"), || async {
        let out = h
            .run(json!({"runtime_id": rid, "code": code(lang)}))
            .await
            .unwrap();
        stdout(&out).to_string()
    })
    .await;
    h.call(TEARDOWN, json!({"runtime_id": rid})).await.unwrap();

    // A published handler: its registration's check starts what waits.
    let ns = format!("guest-user-{lang}");
    let fid = format!("{ns}::who");
    h.call(
        REGISTER,
        json!({"function_id": fid, "lang": lang, "source": handler(lang)}),
    )
    .await
    .unwrap();
    later_calls(lang, prestart, &format!("handler call, {case}"), || async {
        let out = h.call(&fid, json!({})).await.unwrap();
        format!("{}\n", out.as_str().unwrap_or_default())
    })
    .await;
    h.call(TEARDOWN, json!({"namespace": ns, "lang": lang}))
        .await
        .unwrap();
    h.finish(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_guest_code_runs_as_the_images_user_pre_started() {
    every_path("python", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_guest_code_runs_as_the_images_user_cold() {
    every_path("python", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_guest_code_runs_as_the_images_user_pre_started() {
    every_path("node", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_guest_code_runs_as_the_images_user_cold() {
    every_path("node", false).await;
}
