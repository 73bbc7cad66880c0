//! What runs inside a VM: the wrapper scripts (embedded from `guest/`), the
//! exec argv/env/stdin for a run or a handler call, the result frame parser,
//! and the output caps.
//!
//! Wrappers travel inline in `argv` and code travels on stdin, so a run plants
//! nothing. The only planted files are the node SDK bundle (for code that
//! names `iii`) and registered handler sources, both under private tmpfs
//! paths of the VM (`/node_modules`, `/tmp`), never the shared image rootfs.
//! An exec runs as root in the VM; each wrapper drops to the image's
//! unprivileged user before the guest's code runs (`guest/README.md`), so
//! guest code cannot write the image's rootfs, which every VM of the image
//! shares.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::ids::Lang;
use crate::sandbox::ExecParams;

// Each wrapper is its language's shared prelude followed by the wrapper
// itself, sent as one inline script.
pub(crate) const NODE_RUN: &str = concat!(
    include_str!("../guest/node/shared.mjs"),
    include_str!("../guest/node/run.mjs")
);
/// What node's long-lived interpreters (a session's, a scope server) share,
/// put in front of each.
pub(crate) const NODE_SERVING: &str = include_str!("../guest/node/serving.mjs");
/// The prelude of node's wrappers, on its own (a scope server's fresh
/// contexts use it too).
pub(crate) const NODE_SHARED: &str = include_str!("../guest/node/shared.mjs");
pub(crate) const NODE_INVOKE: &str = concat!(
    include_str!("../guest/node/shared.mjs"),
    include_str!("../guest/node/invoke.mjs")
);
pub(crate) const PYTHON_RUN: &str = concat!(
    include_str!("../guest/python/shared.py"),
    include_str!("../guest/python/run.py")
);
pub(crate) const PYTHON_INVOKE: &str = concat!(
    include_str!("../guest/python/shared.py"),
    include_str!("../guest/python/invoke.py")
);
/// The one-time Python SDK install (staged, then renamed into place).
pub const PYTHON_INSTALL_SDK: &str = include_str!("../guest/python/install_sdk.py");
/// Packs, reads out and unpacks the installed Python SDK (see `python_sdk`).
pub const PYTHON_SDK_ARCHIVE: &str = include_str!("../guest/python/sdk_archive.py");
/// npm `iii-sdk`, bundled into one ES module by build.rs.
pub const NODE_SDK_BUNDLE: &str = include_str!(concat!(env!("OUT_DIR"), "/iii-sdk.mjs"));

/// Where the node bundle is planted; the wrapper adds its package.json.
pub(crate) const NODE_SDK_PATH: &str = "/node_modules/iii-sdk/dist/index.mjs";
/// Working directory of every exec.
pub(crate) const WORKDIR: &str = "/tmp";
/// Where registered handler sources live inside a namespace runtime.
pub(crate) const HANDLER_DIR: &str = "/tmp/.scr/fn";

/// Prefix of the guest worker names; wrappers append a random suffix so two
/// live guests never share a name.
pub(crate) const RUN_WORKER_NAME: &str = "sandbox-code-runner:run";

/// Whether source text can reach the `iii` global: it names the identifier.
pub(crate) fn names_iii(source: &str) -> bool {
    let bytes = source.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut from = 0;
    while let Some(pos) = source[from..].find("iii") {
        let at = from + pos;
        let before_ok = at == 0 || !ident(bytes[at - 1]);
        let after = at + 3;
        let after_ok = after >= bytes.len() || !ident(bytes[after]);
        if before_ok && after_ok {
            return true;
        }
        from = at + 1;
    }
    false
}

fn interpreter(lang: Lang, script: &str) -> Vec<String> {
    match lang {
        Lang::Node => vec![
            "node".into(),
            "--input-type=module".into(),
            "-e".into(),
            script.into(),
        ],
        // Isolated (-I): the interpreter starts as root and must load
        // nothing from the cwd (/tmp, the guest's), a user site or PYTHON*
        // variables; the wrapper gives guest code back `python3 -c`'s
        // sys.path once it has dropped to the guest user.
        // (`-Ic`: the script stays argv[2].)
        Lang::Python => vec!["python3".into(), "-Ic".into(), script.into()],
    }
}

/// The exec of a run: the wrapper inline, the code on stdin.
pub fn run_exec(lang: Lang, code: &str, timeout_ms: u64) -> ExecParams {
    let script = match lang {
        Lang::Node => NODE_RUN,
        Lang::Python => PYTHON_RUN,
    };
    ExecParams {
        argv: interpreter(lang, script),
        stdin: Some(code.as_bytes().to_vec()),
        env: BTreeMap::from([("SCR_WORKER_NAME".to_string(), RUN_WORKER_NAME.to_string())]),
        timeout_ms,
        workdir: Some(WORKDIR.into()),
        stream: None,
    }
}

/// [`run_exec`] whose wrapper reports the code's value in a result frame
/// carrying `secret` (`run_result`), sized against `max_result_bytes`.
pub(crate) fn run_exec_with_result(
    lang: Lang,
    code: &str,
    timeout_ms: u64,
    secret: &str,
    max_result_bytes: usize,
) -> ExecParams {
    let mut p = run_exec(lang, code, timeout_ms);
    p.env
        .insert("SCR_RESULT_SECRET".to_string(), secret.to_string());
    p.env
        .insert("SCR_RESULT_MAX".to_string(), max_result_bytes.to_string());
    p
}

/// Whether a handler exec only loads and checks the module, or calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvokeMode {
    Check,
    Call,
}

/// The exec of a handler call (or of its registration check).
pub fn invoke_exec(
    lang: Lang,
    function_id: &str,
    module_path: &str,
    mode: InvokeMode,
    payload: &Value,
    secret: &str,
    timeout_ms: u64,
) -> ExecParams {
    let script = match lang {
        Lang::Node => NODE_INVOKE,
        Lang::Python => PYTHON_INVOKE,
    };
    let stdin = serde_json::json!({
        "secret": secret,
        "mode": match mode { InvokeMode::Check => "check", InvokeMode::Call => "call" },
        "module": module_path,
        "payload": payload,
    });
    ExecParams {
        argv: interpreter(lang, script),
        stdin: Some(stdin.to_string().into_bytes()),
        env: BTreeMap::from([(
            "SCR_WORKER_NAME".to_string(),
            format!("sandbox-code-runner:{function_id}"),
        )]),
        timeout_ms,
        workdir: Some(WORKDIR.into()),
        stream: None,
    }
}

/// The one-time Python SDK install, run as its own exec with its own budget.
pub(crate) fn python_sdk_install(timeout_ms: u64) -> ExecParams {
    ExecParams {
        argv: interpreter(Lang::Python, PYTHON_INSTALL_SDK),
        stdin: None,
        env: BTreeMap::new(),
        timeout_ms,
        workdir: Some(WORKDIR.into()),
        stream: None,
    }
}

/// Path of a handler's source inside its runtime. `seq` keeps names unique
/// and short whatever the function id.
pub fn handler_module_path(lang: Lang, seq: u64, function_id: &str) -> String {
    let slug: String = function_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect();
    let ext = match lang {
        Lang::Node => "mjs",
        Lang::Python => "py",
    };
    format!("{HANDLER_DIR}/f{seq}-{slug}.{ext}")
}

/// A fresh per-call secret: 128 random bits, hex.
pub fn new_secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a handler exec reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    /// The handler's return value.
    Ok(Value),
    /// The wrapper's failure report.
    Err { kind: FrameError, message: String },
    /// No frame carrying this call's secret.
    Missing,
}

/// The `type` of a wrapper's failure report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The handler raised (also any type this worker does not know).
    Throw,
    /// The handler's value has no JSON form.
    NotJson,
    /// The module defines no callable `handler`.
    NoHandler,
    /// `handler` is a coroutine function (Python).
    AsyncHandler,
    /// The module did not load.
    LoadError,
}

impl FrameError {
    fn from_type(t: &str) -> FrameError {
        match t {
            "not_json" => FrameError::NotJson,
            "no_handler" => FrameError::NoHandler,
            "async_handler" => FrameError::AsyncHandler,
            "load_error" => FrameError::LoadError,
            _ => FrameError::Throw,
        }
    }
}

const FRAME_TAG: &str = "\u{1e}SCR1 ";

/// The last frame line carrying `secret` in a wrapper's stdout: where its
/// tag starts, where its line ends (past its newline), its kind and body.
pub(crate) struct FrameLine<'a> {
    pub(crate) at: usize,
    pub(crate) end: usize,
    pub(crate) kind: &'a str,
    pub(crate) body: &'a str,
}

/// Finds the last line tagged with `secret` (see [`FrameLine`]). Only the
/// wrapper knows the secret, so a line the user's code printed never
/// matches.
pub(crate) fn last_frame<'a>(stdout: &'a str, secret: &str) -> Option<FrameLine<'a>> {
    let needle = format!("{FRAME_TAG}{secret} ");
    let at = stdout.rfind(&needle)?;
    let rest = &stdout[at + needle.len()..];
    let (line, end) = match rest.find('\n') {
        Some(n) => (&rest[..n], at + needle.len() + n + 1),
        None => (rest, stdout.len()),
    };
    let (kind, body) = line.split_once(' ').unwrap_or((line, ""));
    Some(FrameLine {
        at,
        end,
        kind,
        body,
    })
}

/// Finds the frame that carries `secret`. Only the wrapper knows the secret,
/// so a frame printed by the handler never matches; the last genuine frame
/// wins, and a malformed one counts as missing.
pub(crate) fn parse_frame(stdout: &str, secret: &str) -> Frame {
    let Some(FrameLine { kind, body, .. }) = last_frame(stdout, secret) else {
        return Frame::Missing;
    };
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return Frame::Missing;
    };
    match kind {
        "ok" => Frame::Ok(value),
        "err" => Frame::Err {
            kind: FrameError::from_type(
                value.get("type").and_then(Value::as_str).unwrap_or("throw"),
            ),
            message: value
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        },
        _ => Frame::Missing,
    }
}

/// The daemon's own silent cut of each stream.
pub(crate) const DAEMON_STREAM_CAP: usize = crate::daemon_limits::DAEMON.stream_cap_bytes.value;

/// Caps one stream to `budget` bytes: the first 60% and the last 40% on
/// UTF-8 boundaries, with one marker line between. `budget == 0` disables
/// the cap; a stream the daemon already cut is marked either way.
pub(crate) fn cap_stream(text: &str, budget: usize, stream: &str) -> String {
    let daemon_cut = text.len() >= DAEMON_STREAM_CAP;
    if budget == 0 || text.len() <= budget {
        if daemon_cut {
            return format!("{text}\n{}\n", marker(stream, text.len()));
        }
        return text.to_string();
    }
    let head_len = floor_boundary(text, budget * 6 / 10);
    let tail_start = ceil_boundary(text, text.len() - (budget - budget * 6 / 10));
    let head = &text[..head_len];
    let tail = &text[tail_start.max(head_len)..];
    let mut out = String::with_capacity(budget + 80);
    out.push_str(head);
    if !head.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(stream, text.len()));
    out.push('\n');
    out.push_str(tail);
    out
}

fn marker(stream: &str, len: usize) -> String {
    let kb = (len + 512) / 1024;
    format!("[…{stream} truncated: was ~{kb} KB; middle omitted]")
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    /// The result frame's tag is spelled the same in the worker and in
    /// both languages' wrappers (guest/PROTOCOL.md, "Markers").
    #[test]
    fn the_frame_tag_is_one_marker_on_every_side() {
        let tag = FRAME_TAG.trim_end().replace('\u{1e}', "\\x1e");
        assert!(PYTHON_INVOKE.contains(&format!("\"{tag} %s \"")), "{tag}");
        assert!(PYTHON_RUN.contains(&format!("{tag} %s %s %s")), "{tag}");
        assert!(
            NODE_INVOKE.contains(&format!("{tag} ${{secret}} ${{kind}}")),
            "{tag}"
        );
    }

    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("print(2+2)", false)]
    #[case("await iii.trigger({})", true)]
    #[case("x = iii", true)]
    #[case("iiii = 1; ii = 2", false)]
    #[case("my_iii = 1", false)]
    #[case("$iii", false)]
    #[case("iii", true)]
    #[case("é iii é", true)]
    fn names_iii_matches_the_identifier_only(#[case] src: &str, #[case] expected: bool) {
        assert_eq!(names_iii(src), expected);
    }

    const S: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn genuine_frame_is_found_after_prints() {
        let out = format!("hello\n\u{1e}SCR1 {S} ok {{\"doubled\":42}}\n");
        assert_eq!(parse_frame(&out, S), Frame::Ok(json!({"doubled": 42})));
    }

    #[test]
    fn forged_frame_without_the_secret_is_ignored() {
        let forged = "\u{1e}SCR1 ffffffffffffffffffffffffffffffff ok {\"pwned\":true}\n";
        assert_eq!(parse_frame(forged, S), Frame::Missing);
        let both = format!("{forged}\u{1e}SCR1 {S} ok 1\n");
        assert_eq!(parse_frame(&both, S), Frame::Ok(json!(1)));
    }

    #[rstest]
    #[case("")]
    #[case("no frame at all")]
    #[case("\u{1e}SCR1 0123456789abcdef0123456789abcdef ok {not json")]
    #[case("\u{1e}SCR1 0123456789abcdef0123456789abcdef weird 1")]
    #[case("\u{1e}SCR1 0123456789abcdef0123456789abcdef")]
    #[case("\u{fffd}\u{fffd} invalid utf-8 decoded lossily \u{fffd}")]
    fn hostile_output_is_missing_not_a_panic(#[case] out: &str) {
        assert_eq!(parse_frame(out, S), Frame::Missing);
    }

    #[test]
    fn huge_frame_parses() {
        let big = "x".repeat(900_000);
        let out = format!("\u{1e}SCR1 {S} ok \"{big}\"\n");
        assert_eq!(parse_frame(&out, S), Frame::Ok(Value::String(big)));
    }

    #[test]
    fn error_frame_carries_its_kind() {
        let out = format!("\u{1e}SCR1 {S} err {{\"type\":\"not_json\",\"message\":\"m\"}}\n");
        assert_eq!(
            parse_frame(&out, S),
            Frame::Err {
                kind: FrameError::NotJson,
                message: "m".into()
            }
        );
    }

    #[test]
    fn small_streams_pass_untouched() {
        assert_eq!(cap_stream("abc", 16, "stdout"), "abc");
        assert_eq!(cap_stream("abc", 0, "stdout"), "abc");
    }

    #[test]
    fn big_streams_keep_head_and_tail_with_one_marker() {
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let out = cap_stream(&text, 1000, "stderr");
        assert!(out.starts_with("line 0\n"));
        assert!(out.ends_with("line 4999\n"));
        assert_eq!(out.matches("[…stderr truncated: was ~").count(), 1);
        assert!(out.len() < 1000 + 80);
    }

    #[test]
    fn caps_respect_utf8_boundaries() {
        let text = "é".repeat(10_000);
        let out = cap_stream(&text, 1001, "stdout");
        assert!(out.contains("truncated"));
        assert!(out.chars().filter(|c| *c == 'é').count() > 400);
    }

    #[test]
    fn daemon_cut_streams_are_marked_even_uncapped() {
        let text = "a".repeat(DAEMON_STREAM_CAP);
        let out = cap_stream(&text, 0, "stdout");
        assert!(out.ends_with("[…stdout truncated: was ~1024 KB; middle omitted]\n"));
    }
}
