//! Contract tests of the iii-sandbox daemon double, driven through a real
//! `iii-sdk` client over the stand-in engine, as a worker would drive the
//! real daemon. Every S-code the double produces is asserted with its exact
//! wire envelope: `invocation_failed` / `handler error: {json}` with the
//! JSON keys in alphabetical order (see docs/sandbox.md).

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use code_runner_conformance::standin::engine::StandInEngine;
use code_runner_conformance::standin::host::pids_with;
use code_runner_conformance::standin::sandbox_double::{SandboxDouble, SandboxLimits};
use common::{client, wait_for};
use iii_sdk::channel::{ChannelReader, ChannelWriter, StreamChannelRef};
use iii_sdk::helpers::create_channel;
use iii_sdk::protocol::TriggerRequest;
use iii_sdk::{Error, IIIClient};
use rstest::rstest;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

const DOCS: &str =
    "https://github.com/iii-hq/iii/blob/main/crates/iii-worker/src/sandbox_daemon/README.md#";
const NOTE_INVALID: &str = "see message: examples are inline";
const NOTE_GONE: &str = "the sandbox is gone; call sandbox::create first";
const NOTE_IMAGE: &str =
    "set `image` to a value listed in the message or add a custom_images entry in iii.config.yaml";
const NOTE_TIMEOUT: &str =
    "raise `timeout_ms` on the exec call or split the work into smaller steps";
const NOTE_PLATFORM: &str = "platform-level failure; not auto-recoverable";
const NOTE_PARENTS: &str = "merge `fix` into the original request and resubmit: `parents: true` auto-creates missing intermediate directories";
/// How long one data-channel step may take before a test fails.
const CHANNEL_STEP: Duration = Duration::from_secs(20);
const VM_GONE: &str = "VM boot failed: shell run: session terminated: vm disconnected mid-run";

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// A stand-in engine, the double attached to it, and a caller.
struct Harness {
    engine: Option<StandInEngine>,
    double: Option<SandboxDouble>,
    caller: IIIClient,
}

async fn harness(limits: SandboxLimits) -> Harness {
    let engine = StandInEngine::start(0).await.expect("engine starts");
    let double = SandboxDouble::start(&engine.url(), limits)
        .await
        .expect("the double starts (namespaces available on this host)");
    let caller = client(&engine.url(), "sandbox-contract-caller").await;
    Harness {
        engine: Some(engine),
        double: Some(double),
        caller,
    }
}

async fn default_harness() -> Harness {
    harness(SandboxLimits::default()).await
}

impl Harness {
    fn double(&self) -> &SandboxDouble {
        self.double.as_ref().expect("double running")
    }

    async fn call(&self, function_id: &str, payload: Value) -> Result<Value, Error> {
        self.caller
            .trigger(TriggerRequest {
                function_id: function_id.to_string(),
                payload,
                action: None,
                timeout_ms: Some(120_000),
            })
            .await
    }

    async fn ok(&self, function_id: &str, payload: Value) -> Value {
        match self.call(function_id, payload.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("{function_id} {payload} failed: {e:?}"),
        }
    }

    async fn create(&self, payload: Value) -> String {
        let out = self.ok("sandbox::create", payload).await;
        out["sandbox_id"]
            .as_str()
            .expect("sandbox_id in create response")
            .to_string()
    }

    async fn python(&self) -> String {
        self.create(json!({ "image": "python" })).await
    }

    async fn exec(&self, id: &str, mut req: Value) -> Result<Value, Error> {
        req["sandbox_id"] = json!(id);
        self.call("sandbox::exec", req).await
    }

    async fn exec_ok(&self, id: &str, req: Value) -> Value {
        match self.exec(id, req.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("exec {req} failed: {e:?}"),
        }
    }

    async fn sh(&self, id: &str, script: &str) -> Value {
        self.exec_ok(id, json!({ "argv": ["sh", "-c", script] }))
            .await
    }

    /// Everything the data channel of an `fs::read` answer carries.
    async fn read_content(&self, read: &Value) -> Vec<u8> {
        assert_eq!(read["content"]["direction"], "read", "{read}");
        let r: StreamChannelRef =
            serde_json::from_value(read["content"].clone()).expect("a reader ref in `content`");
        let url = self.engine.as_ref().expect("engine").url();
        tokio::time::timeout(CHANNEL_STEP, ChannelReader::new(&url, &r).read_all())
            .await
            .expect("the file's channel ends")
            .expect("the file's channel reads")
    }

    /// A fresh channel whose writer has written `bytes`, closed when `close`.
    async fn channel_with(&self, bytes: &[u8], close: bool) -> (Value, ChannelWriter) {
        let ch = create_channel(&self.caller, None)
            .await
            .expect("a data channel");
        tokio::time::timeout(CHANNEL_STEP, ch.writer.write(bytes))
            .await
            .expect("written in time")
            .expect("written");
        if close {
            ch.writer.close().await.expect("closed");
        }
        let reader = serde_json::to_value(&ch.reader_ref).expect("a ref");
        (reader, ch.writer)
    }

    async fn listed(&self) -> Vec<Value> {
        let out = self.ok("sandbox::list", json!({})).await;
        out["sandboxes"].as_array().cloned().unwrap_or_default()
    }

    async fn listed_entry(&self, id: &str) -> Option<Value> {
        self.listed()
            .await
            .into_iter()
            .find(|s| s["sandbox_id"] == id)
    }

    /// Starts `sleep <marker>` in `id` in the background and waits until
    /// its process runs: the marker, and the pending exec call.
    async fn sleeping(&self, id: &str) -> (String, JoinHandle<Result<Value, Error>>) {
        let marker = sleep_marker();
        let caller = self.caller.clone();
        let payload = json!({ "sandbox_id": id, "argv": ["sleep", marker], "timeout_ms": 60_000 });
        let call = tokio::spawn(async move {
            caller
                .trigger(TriggerRequest {
                    function_id: "sandbox::exec".into(),
                    payload,
                    action: None,
                    timeout_ms: Some(90_000),
                })
                .await
        });
        let started = wait_for(Duration::from_secs(10), || async {
            !pids_with(&marker).is_empty()
        })
        .await;
        assert!(started, "the sleep runs");
        (marker, call)
    }

    /// A `sandbox::stop` of `id`, under way in its own task.
    fn spawn_stop(&self, id: &str) -> JoinHandle<Result<Value, Error>> {
        let caller = self.caller.clone();
        let payload = json!({ "sandbox_id": id });
        tokio::spawn(async move {
            caller
                .trigger(TriggerRequest {
                    function_id: "sandbox::stop".into(),
                    payload,
                    action: None,
                    timeout_ms: Some(60_000),
                })
                .await
        })
    }

    async fn finish(mut self) {
        self.caller.shutdown_async().await;
        if let Some(d) = self.double.take() {
            d.shutdown().await;
        }
        if let Some(e) = self.engine.take() {
            e.shutdown().await;
        }
    }
}

/// Parses an S-code failure: checks the outer envelope and the exact key
/// set and order of the inner JSON, and returns it.
fn s_error(err: &Error) -> Value {
    let Error::Remote { code, message, .. } = err else {
        panic!("expected a remote error, got {err:?}");
    };
    assert_eq!(code, "invocation_failed", "{message}");
    let raw = message
        .strip_prefix("handler error: ")
        .unwrap_or_else(|| panic!("no handler-error prefix: {message}"));
    let v: Value = serde_json::from_str(raw).unwrap_or_else(|e| panic!("{e}: {raw}"));
    let keys = [
        "code",
        "docs_url",
        "fix",
        "fix_note",
        "message",
        "retryable",
        "type",
    ];
    assert_eq!(v.as_object().map(|o| o.len()), Some(keys.len()), "{raw}");
    assert!(raw.starts_with("{\"code\":"), "{raw}");
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| {
            raw.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} missing in {raw}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "keys not alphabetical: {raw}"
    );
    v
}

fn type_of(code: &str) -> &'static str {
    match code {
        "S001" | "S002" | "S003" | "S004" => "validation",
        "S100" | "S400" => "config",
        "S200" => "execution",
        "S300" => "platform",
        "S218" => "transient",
        c if c.starts_with("S21") => "filesystem",
        other => panic!("unexpected code {other}"),
    }
}

/// Asserts the whole envelope of an S-code failure.
fn assert_s(err: &Error, code: &str, message: &str, fix: Value, fix_note: Option<&str>) {
    let v = s_error(err);
    assert_eq!(
        v,
        json!({
            "code": code,
            "docs_url": format!("{DOCS}{code}"),
            "fix": fix,
            "fix_note": fix_note,
            "message": message,
            "retryable": false,
            "type": type_of(code),
        })
    );
}

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A `sleep` argument no other process on the host will carry.
fn sleep_marker() -> String {
    format!(
        "{}.{}",
        6000 + rand::random::<u16>() % 1000,
        rand::random::<u32>()
    )
}

fn scratch_of(id: &str) -> std::path::PathBuf {
    code_runner_conformance::standin::sandbox_double::private_tmpfs::scratch_parent()
        .join(format!("scr-sandbox-{id}"))
}

// ---------------------------------------------------------------------------
// Registration, request decoding
// ---------------------------------------------------------------------------

#[tokio::test]
async fn registers_as_iii_sandbox_with_schemas() {
    let h = default_harness().await;
    let engine = h.engine.as_ref().expect("engine");
    assert!(engine.worker_names().contains(&"iii-sandbox".to_string()));
    let ids = engine.function_ids("default");
    for f in [
        "sandbox::create",
        "sandbox::exec",
        "sandbox::stop",
        "sandbox::list",
        "sandbox::run",
        "sandbox::catalog::list",
        "sandbox::fs::write",
        "sandbox::fs::read",
        "sandbox::fs::mkdir",
    ] {
        assert!(ids.contains(&f.to_string()), "{f} not registered: {ids:?}");
    }
    let info = h
        .ok(
            "engine::functions::info",
            json!({ "function_id": "sandbox::create" }),
        )
        .await;
    assert_eq!(info["worker_name"], "iii-sandbox");
    assert_eq!(info["request_schema"]["required"], json!(["image"]));
    h.finish().await;
}

#[rstest]
#[case("sandbox::create", json!({}), "missing field `image`")]
#[case("sandbox::exec", json!({ "cmd": "true" }), "missing field `sandbox_id`")]
#[case("sandbox::run", json!({ "image": "python", "code": "1" }), "missing field `lang`")]
#[case("sandbox::create", json!({ "image": 7 }), "invalid type: integer `7`, expected a string")]
#[tokio::test]
async fn undecodable_payloads_fail_in_the_sdk(
    #[case] function_id: &str,
    #[case] payload: Value,
    #[case] detail: &str,
) {
    let h = default_harness().await;
    let err = h.call(function_id, payload).await.expect_err("must fail");
    let Error::Remote { code, message, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(code, "invocation_failed");
    assert!(
        message.starts_with("serialization error: ") && message.contains(detail),
        "{message}"
    );
    h.finish().await;
}

#[tokio::test]
async fn unknown_fields_are_ignored() {
    let h = default_harness().await;
    let id = h
        .create(json!({ "image": "python", "idle_ttl": 5, "bogus": [1, 2] }))
        .await;
    let out = h
        .exec_ok(
            &id,
            json!({ "cmd": "echo hi", "shell": true, "cwd": "/nope" }),
        )
        .await;
    assert_eq!(out["stdout"], "hi\n");
    h.finish().await;
}

// ---------------------------------------------------------------------------
// S001
// ---------------------------------------------------------------------------

#[rstest]
#[case("sandbox::exec", json!({ "sandbox_id": "nope", "cmd": "true" }))]
#[case("sandbox::stop", json!({ "sandbox_id": "nope" }))]
#[case("sandbox::fs::read", json!({ "sandbox_id": "nope", "path": "/tmp/x" }))]
#[case("sandbox::fs::write", json!({ "sandbox_id": "nope", "path": "/tmp/x", "content": "x" }))]
#[case("sandbox::fs::mkdir", json!({ "sandbox_id": "nope", "path": "/tmp/x" }))]
#[tokio::test]
async fn s001_bad_uuid(#[case] function_id: &str, #[case] payload: Value) {
    let h = default_harness().await;
    let err = h.call(function_id, payload).await.expect_err("S001");
    assert_s(
        &err,
        "S001",
        "invalid request: sandbox_id is not a valid UUID: nope",
        Value::Null,
        Some(NOTE_INVALID),
    );
    h.finish().await;
}

#[rstest]
#[case(json!({ "cmd": "cat", "stdin": "!!not base64!!" }), "invalid request: stdin base64 decode: ")]
#[case(json!({ "cmd": "echo", "argv": ["echo", "x"] }), "invalid request: `argv` cannot be combined with `cmd` or `args`. Pick one shape. Got argv=[\"echo\", \"x\"], cmd=\"echo\", args=[]")]
#[case(json!({ "args": ["x"], "argv": ["echo"] }), "invalid request: `argv` cannot be combined with `cmd` or `args`. Pick one shape. Got argv=[\"echo\"], cmd=\"\", args=[\"x\"]")]
#[case(json!({}), "invalid request: cmd is required and must be non-empty (or pass `argv` with at least one element)")]
#[case(json!({ "cmd": "" }), "invalid request: cmd is required and must be non-empty (or pass `argv` with at least one element)")]
#[case(json!({ "cmd": "echo 'unbalanced" }), "invalid request: cmd has unbalanced quotes and cannot be shlex-split: \"echo 'unbalanced\". Use `argv: [...]` for argv arrays with embedded quotes.")]
#[case(json!({ "cmd": "echo a", "args": ["b"] }), "invalid request: cmd contains whitespace (shell-line shape) AND `args` is set; that is ambiguous. Either remove whitespace from cmd and pass arguments via `args`, or leave `args` empty so cmd is shlex-split. Got cmd=\"echo a\", args=[\"b\"]")]
#[case(json!({ "cmd": "env", "env": { "1BAD": "x" } }), "invalid request: env contains invalid variable name(s): [\"1BAD\"]. Names must match `[A-Za-z_][A-Za-z0-9_]*`.")]
#[tokio::test]
async fn s001_exec_requests(#[case] req: Value, #[case] message: &str) {
    let h = default_harness().await;
    let id = h.python().await;
    let err = h.exec(&id, req).await.expect_err("S001");
    let v = s_error(&err);
    assert_eq!(v["code"], "S001");
    assert_eq!(v["type"], "validation");
    assert_eq!(v["fix_note"], NOTE_INVALID);
    assert!(v["fix"].is_null());
    let got = v["message"].as_str().unwrap_or_default();
    if message.ends_with(": ") {
        assert!(got.starts_with(message), "{got}");
    } else {
        assert_eq!(got, message);
    }
    h.finish().await;
}

#[tokio::test]
async fn s001_create_env_name_checked_after_image() {
    let h = default_harness().await;
    let err = h
        .call(
            "sandbox::create",
            json!({ "image": "python", "env": { "1BAD": "x", "OK": "y" } }),
        )
        .await
        .expect_err("S001");
    assert_s(
        &err,
        "S001",
        "invalid request: env contains invalid variable name(s): [\"1BAD\"]. Names must match `[A-Za-z_][A-Za-z0-9_]*`.",
        Value::Null,
        Some(NOTE_INVALID),
    );
    // Image is checked first.
    let err = h
        .call(
            "sandbox::create",
            json!({ "image": "ubuntu", "env": { "1BAD": "x" } }),
        )
        .await
        .expect_err("S100");
    assert_eq!(s_error(&err)["code"], "S100");
    assert!(h.listed().await.is_empty(), "no sandbox left behind");
    h.finish().await;
}

#[rstest]
#[case(json!({ "content": "a", "content_b64": "YQ==" }), "invalid request: set either `content` (string or StreamChannelRef) or `content_b64`, not both")]
#[case(json!({}), "invalid request: missing file body: set `content` (string or StreamChannelRef) or `content_b64`")]
#[case(json!({ "content_b64": "***" }), "invalid request: content_b64 is not valid base64: ")]
#[tokio::test]
async fn s001_fs_write_bodies(#[case] body: Value, #[case] message: &str) {
    let h = default_harness().await;
    let id = h.python().await;
    let mut req = body;
    req["sandbox_id"] = json!(id);
    req["path"] = json!("/tmp/x");
    let err = h.call("sandbox::fs::write", req).await.expect_err("S001");
    let v = s_error(&err);
    assert_eq!(v["code"], "S001");
    let got = v["message"].as_str().unwrap_or_default();
    assert!(got.starts_with(message), "{got}");
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Data channels
// ---------------------------------------------------------------------------

/// Bytes that are not UTF-8 and would show a dropped or reordered frame.
fn channel_payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ 0x80).collect()
}

#[tokio::test]
async fn fs_write_takes_its_body_from_a_data_channel() {
    let h = default_harness().await;
    let id = h.python().await;
    let data = channel_payload(1_500_001);
    let (reader, _writer) = h.channel_with(&data, true).await;
    let out = h
        .ok(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/work/big.bin", "content": reader, "parents": true }),
        )
        .await;
    assert_eq!(
        out,
        json!({ "bytes_written": data.len(), "path": "/work/big.bin" })
    );
    let counted = h.sh(&id, "wc -c < /work/big.bin").await;
    assert_eq!(counted["stdout"], format!("{}\n", data.len()));
    let read = h
        .ok(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/work/big.bin" }),
        )
        .await;
    assert!(read.get("body").is_none(), "not UTF-8: no inline body");
    assert!(
        h.read_content(&read).await == data,
        "the same bytes come back"
    );

    // A text body through a channel, and an empty one.
    let (reader, _writer) = h.channel_with(b"print('streamed')\n", true).await;
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": id, "path": "/work/s.py", "content": reader }),
    )
    .await;
    let ran = h.exec_ok(&id, json!({ "cmd": "python3 /work/s.py" })).await;
    assert_eq!(ran["stdout"], "streamed\n");
    let (reader, _writer) = h.channel_with(b"", true).await;
    let out = h
        .ok(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/work/empty", "content": reader }),
        )
        .await;
    assert_eq!(out["bytes_written"], 0);
    h.finish().await;
}

/// A channel that stops delivering is the daemon's one retryable code, and
/// nothing is written.
#[tokio::test]
async fn fs_write_from_a_stalled_channel_is_s218() {
    let h = default_harness().await;
    let id = h.python().await;
    let (reader, writer) = h.channel_with(b"the first part", false).await;
    let started = Instant::now();
    let err = h
        .call(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/tmp/partial", "content": reader }),
        )
        .await
        .expect_err("S218");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "after 5 s idle"
    );
    assert_eq!(
        s_error(&err),
        json!({
            "code": "S218",
            "docs_url": format!("{DOCS}S218"),
            "fix": null,
            "fix_note": null,
            "message": "fs channel aborted: no chunks from caller for 5s — channel stalled or aborted",
            "retryable": true,
            "type": "transient",
        })
    );
    drop(writer);
    let seen = h.sh(&id, "test -e /tmp/partial || echo absent").await;
    assert_eq!(seen["stdout"], "absent\n");
    h.finish().await;
}

/// A reader ref the engine does not know fails as the daemon's channel
/// reader does: S216, with the SDK's connect error in the message.
#[tokio::test]
async fn fs_write_from_an_unknown_channel_is_s216() {
    let h = default_harness().await;
    let id = h.python().await;
    let (mut reader, _writer) = h.channel_with(b"x", true).await;
    reader["access_key"] = json!("wrong");
    let err = h
        .call(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/tmp/x", "content": reader }),
        )
        .await
        .expect_err("S216");
    assert_s(
        &err,
        "S216",
        "fs i/o error: shell client error: io: read from caller: channel read error: websocket error: HTTP error: 404 Not Found",
        Value::Null,
        None,
    );
    h.finish().await;
}

// ---------------------------------------------------------------------------
// S002, S004, stop
// ---------------------------------------------------------------------------

#[tokio::test]
async fn s002_unknown_and_after_stop() {
    let h = default_harness().await;
    let ghost = uuid::Uuid::new_v4().to_string();
    let err = h
        .exec(&ghost, json!({ "cmd": "true" }))
        .await
        .expect_err("S002");
    assert_s(
        &err,
        "S002",
        &format!("sandbox not found: {ghost}"),
        Value::Null,
        Some(NOTE_GONE),
    );

    let id = h.python().await;
    let scratch = scratch_of(&id);
    assert!(scratch.is_dir());
    let started = Instant::now();
    let out = h
        .ok("sandbox::stop", json!({ "sandbox_id": id, "wait": true }))
        .await;
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "stop pays the 200 ms grace"
    );
    assert_eq!(out, json!({ "sandbox_id": id, "stopped": true }));
    assert!(!scratch.exists(), "scratch removed on stop");
    assert!(h.listed_entry(&id).await.is_none(), "entry removed on stop");
    assert!(h.double().live().is_empty());

    for (f, payload) in [
        ("sandbox::exec", json!({ "sandbox_id": id, "cmd": "true" })),
        ("sandbox::stop", json!({ "sandbox_id": id })),
        (
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/tmp" }),
        ),
        (
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/tmp/x", "content": "" }),
        ),
        (
            "sandbox::fs::mkdir",
            json!({ "sandbox_id": id, "path": "/x" }),
        ),
    ] {
        let err = h.call(f, payload).await.expect_err("S002");
        assert_s(
            &err,
            "S002",
            &format!("sandbox not found: {id}"),
            Value::Null,
            Some(NOTE_GONE),
        );
    }
    h.finish().await;
}

/// S004 is the reaper's window: it marks a sandbox stopped when it claims
/// it, before the grace (a `sandbox::stop` does not: see
/// `a_stop_ends_the_vm_before_its_grace_and_the_entry_after`).
#[tokio::test]
async fn s004_while_the_reaper_stops_a_sandbox() {
    let h = harness(SandboxLimits {
        stop_grace_ms: 3_000,
        reaper_interval_ms: 100,
        ..SandboxLimits::default()
    })
    .await;
    let id = h
        .create(json!({ "image": "python", "idle_timeout_secs": 1 }))
        .await;
    let marked = wait_for(Duration::from_secs(10), || async {
        h.listed_entry(&id)
            .await
            .is_some_and(|s| s["stopped"] == true)
    })
    .await;
    assert!(marked, "list shows stopped:true during the reaper's grace");
    for (f, payload) in [
        ("sandbox::exec", json!({ "sandbox_id": id, "cmd": "true" })),
        (
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/tmp" }),
        ),
    ] {
        let err = h.call(f, payload).await.expect_err("S004");
        assert_s(
            &err,
            "S004",
            &format!("sandbox already stopped: {id}"),
            Value::Null,
            Some(NOTE_GONE),
        );
    }
    // A stop during the window answers at once.
    let sent = std::time::Instant::now();
    let again = h.ok("sandbox::stop", json!({ "sandbox_id": id })).await;
    assert_eq!(again, json!({ "sandbox_id": id, "stopped": true }));
    assert!(
        sent.elapsed() < Duration::from_millis(3_000),
        "a stop of a sandbox being reaped does not wait for the reaper's grace"
    );
    let gone = wait_for(Duration::from_secs(10), || async {
        h.listed_entry(&id).await.is_none()
    })
    .await;
    assert!(gone, "the reaper removes the entry after its grace");
    let err = h
        .exec(&id, json!({ "cmd": "true" }))
        .await
        .expect_err("S002");
    assert_eq!(s_error(&err)["code"], "S002");
    h.finish().await;
}

// ---------------------------------------------------------------------------
// S003, S300
// ---------------------------------------------------------------------------

#[tokio::test]
async fn s003_at_the_exec_cap_and_s300_when_stopped_underneath() {
    let h = harness(SandboxLimits {
        max_concurrent_exec_per_sandbox: 1,
        ..SandboxLimits::default()
    })
    .await;
    let id = h.python().await;
    let (marker, long) = h.sleeping(&id).await;
    let busy = wait_for(Duration::from_secs(10), || async {
        h.listed_entry(&id).await.is_some_and(|s| {
            s["exec_in_flight"] == 1 && s["exec_slots_free"] == 0 && s["exec_in_progress"] == true
        })
    })
    .await;
    assert!(busy, "the long exec is in flight");
    let err = h
        .exec(&id, json!({ "cmd": "true" }))
        .await
        .expect_err("S003");
    let v = s_error(&err);
    assert_eq!(v["code"], "S003");
    assert_eq!(v["type"], "validation");
    assert_eq!(v["retryable"], false);
    assert!(v["fix"].is_null());
    assert_eq!(
        v["message"],
        format!("sandbox {id} is at its exec concurrency cap (max_concurrent_exec_per_sandbox)")
    );
    let note = v["fix_note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(
            "this sandbox already has max_concurrent_exec_per_sandbox execs running (default 4);"
        ),
        "{note}"
    );

    h.ok("sandbox::stop", json!({ "sandbox_id": id })).await;
    let err = long.await.expect("join").expect_err("S300");
    assert_s(&err, "S300", VM_GONE, Value::Null, Some(NOTE_PLATFORM));
    assert!(pids_with(&marker).is_empty(), "stop killed the exec");
    h.finish().await;
}

/// The daemon's SIGTERM ends the VM process at once (its handler turns it
/// into the VMM's exit); only the entry's removal waits out the grace. So an
/// exec in flight fails as "disconnected mid-run" while the stop is still
/// sleeping, and every process of the VM is gone by then.
#[tokio::test]
async fn a_stop_ends_the_vm_before_its_grace_and_the_entry_after() {
    let h = harness(SandboxLimits {
        stop_grace_ms: 3_000,
        ..SandboxLimits::default()
    })
    .await;
    let id = h.python().await;
    let (marker, long) = h.sleeping(&id).await;
    let stopping = h.spawn_stop(&id);
    let err = tokio::time::timeout(Duration::from_millis(2_000), long)
        .await
        .expect("the exec in flight ends well inside the stop's 3 s grace")
        .expect("join")
        .expect_err("S300");
    assert_s(&err, "S300", VM_GONE, Value::Null, Some(NOTE_PLATFORM));
    assert!(pids_with(&marker).is_empty(), "the VM's processes are gone");
    assert!(!stopping.is_finished(), "the stop still pays its grace");
    // The daemon marks the sandbox stopped only once its stopper returns:
    // until then it is listed as not stopped, and calls reach for the VM,
    // whose shell socket refuses (S300 for an exec, S216 for an fs op).
    let listed = h.listed_entry(&id).await;
    assert_eq!(
        listed.as_ref().map(|e| &e["stopped"]),
        Some(&json!(false)),
        "the entry stays, not yet stopped, until the grace is over: {listed:?}"
    );
    let refused = format!(
        "worker relay not accepting connections: connect(/tmp/iii-sandbox/{id}/shell.sock): Connection refused (os error 111)"
    );
    let err = h
        .call(
            "sandbox::exec",
            json!({ "sandbox_id": id, "argv": ["true"] }),
        )
        .await
        .expect_err("S300");
    let message = format!("VM boot failed: shell connect: {refused}");
    assert_s(&err, "S300", &message, Value::Null, Some(NOTE_PLATFORM));
    let err = h
        .call(
            "sandbox::fs::mkdir",
            json!({ "sandbox_id": id, "path": "/tmp/made" }),
        )
        .await
        .expect_err("S216");
    let message = format!("fs i/o error: shell client error: {refused}");
    assert_s(&err, "S216", &message, Value::Null, None);
    // A second stop signals the gone VM again and pays a grace of its own.
    let second_sent = std::time::Instant::now();
    let again = h.spawn_stop(&id);
    let first = stopping.await.expect("join").expect("the stop succeeds");
    assert_eq!(first, json!({ "sandbox_id": id, "stopped": true }));
    assert!(h.listed_entry(&id).await.is_none(), "entry removed on stop");
    let second = again
        .await
        .expect("join")
        .expect("the second stop succeeds");
    assert_eq!(second, json!({ "sandbox_id": id, "stopped": true }));
    assert!(
        second_sent.elapsed() >= Duration::from_millis(3_000),
        "the second stop pays a grace of its own"
    );
    h.finish().await;
}

// ---------------------------------------------------------------------------
// S100, S400
// ---------------------------------------------------------------------------

#[rstest]
#[case("ubuntu")]
#[case("docker.io/library/node:20")]
#[tokio::test]
async fn s100_unknown_image(#[case] image: &str) {
    let h = default_harness().await;
    let err = h
        .call("sandbox::create", json!({ "image": image }))
        .await
        .expect_err("S100");
    assert_s(
        &err,
        "S100",
        &format!("image '{image}' not in catalog; valid presets are 'python' and 'node', or add a custom image via worker config (see S100 docs)"),
        Value::Null,
        Some(NOTE_IMAGE),
    );
    h.finish().await;
}

#[tokio::test]
async fn s400_at_capacity_checked_first() {
    let h = harness(SandboxLimits {
        max_concurrent_sandboxes: 2,
        ..SandboxLimits::default()
    })
    .await;
    h.python().await;
    h.create(json!({ "image": "node" })).await;
    let message = "resource limit exceeded: max_concurrent_sandboxes (2) reached";
    let err = h
        .call("sandbox::create", json!({ "image": "python" }))
        .await
        .expect_err("S400");
    assert_s(&err, "S400", message, Value::Null, Some(NOTE_PLATFORM));
    // Capacity comes before the image check.
    let err = h
        .call("sandbox::create", json!({ "image": "ubuntu" }))
        .await
        .expect_err("S400");
    assert_s(&err, "S400", message, Value::Null, Some(NOTE_PLATFORM));
    assert_eq!(h.double().live().len(), 2);
    h.finish().await;
}

// ---------------------------------------------------------------------------
// S200
// ---------------------------------------------------------------------------

#[tokio::test]
async fn s200_timeout_kills_the_whole_tree() {
    let h = default_harness().await;
    let id = h.python().await;
    let marker = sleep_marker();
    let script = format!("sh -c 'sleep {marker}' & sleep {marker} & sleep {marker}; echo never");
    let started = Instant::now();
    let err = h
        .exec(
            &id,
            json!({ "argv": ["sh", "-c", script], "timeout_ms": 500 }),
        )
        .await
        .expect_err("S200");
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_s(
        &err,
        "S200",
        "exec timed out after 500 ms",
        Value::Null,
        Some(NOTE_TIMEOUT),
    );
    assert_eq!(
        pids_with(&marker),
        Vec::<String>::new(),
        "processes survived"
    );
    // The sandbox itself is fine, and its slot was released.
    let out = h.sh(&id, "echo alive").await;
    assert_eq!(out["stdout"], "alive\n");
    let s = h.listed_entry(&id).await.expect("listed");
    assert_eq!(s["exec_in_flight"], 0);
    h.finish().await;
}

#[tokio::test]
async fn s200_timeout_is_clamped_to_the_max() {
    let h = harness(SandboxLimits {
        max_exec_timeout_ms: 300,
        ..SandboxLimits::default()
    })
    .await;
    let id = h.python().await;
    let err = h
        .exec(
            &id,
            json!({ "argv": ["sleep", "30"], "timeout_ms": 60_000 }),
        )
        .await
        .expect_err("S200");
    assert_eq!(s_error(&err)["message"], "exec timed out after 300 ms");
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Filesystem codes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn fs_error_codes() {
    let h = default_harness().await;
    let id = h.python().await;
    // A file to write under, as if it were a directory.
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": id, "path": "/tmp/file", "content": "x" }),
    )
    .await;
    // (function, request beyond the sandbox id, code, message, fix, fix_note)
    let table = [
        (
            "sandbox::fs::write",
            json!({ "path": "/work/app/main.py", "content": "print(1)" }),
            "S211",
            "parent directory not found: parent not found: /work/app",
            json!({ "parents": true }),
            Some(NOTE_PARENTS),
        ),
        (
            "sandbox::fs::read",
            json!({ "path": "/tmp/none" }),
            "S211",
            "file not found: path not found: /tmp/none",
            Value::Null,
            None,
        ),
        (
            "sandbox::fs::read",
            json!({ "path": "/tmp" }),
            "S212",
            "not a directory or wrong type: is a directory: /tmp",
            Value::Null,
            None,
        ),
        (
            "sandbox::fs::mkdir",
            json!({ "path": "/tmp" }),
            "S213",
            "already exists: path already exists: /tmp",
            Value::Null,
            None,
        ),
        (
            "sandbox::fs::write",
            json!({ "path": "/tmp/x", "content": "x", "mode": "rw-r--r--" }),
            "S210",
            "invalid octal mode: rw-r--r--",
            Value::Null,
            None,
        ),
        (
            "sandbox::fs::write",
            json!({ "path": "relative.txt", "content": "x" }),
            "S210",
            "path must be absolute: relative.txt",
            Value::Null,
            None,
        ),
        (
            "sandbox::fs::write",
            json!({ "path": "/tmp/file/child", "content": "x" }),
            "S216",
            "fs i/o error: /tmp/file/child: Not a directory (os error 20)",
            Value::Null,
            None,
        ),
    ];
    for (function, mut request, code, message, fix, note) in table {
        request["sandbox_id"] = json!(id);
        let err = h
            .call(function, request.clone())
            .await
            .expect_err(&format!("{function} {request} fails with {code}"));
        assert_s(&err, code, message, fix, note);
    }
    h.finish().await;
}

#[tokio::test]
async fn fs_write_read_mkdir_roundtrip() {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h
        .ok(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": "/work/app/main.py", "content": "print(6*7)\n", "parents": true, "mode": "0600" }),
        )
        .await;
    assert_eq!(
        out,
        json!({ "bytes_written": 11, "path": "/work/app/main.py" })
    );
    let read = h
        .ok(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/work/app/main.py" }),
        )
        .await;
    assert_eq!(read["body"], "print(6*7)\n");
    assert_eq!(read["size"], 11);
    assert_eq!(read["mode"], "0600");
    assert!(read["mtime"].as_i64().is_some_and(|t| t > 1_600_000_000));
    assert_eq!(h.read_content(&read).await, b"print(6*7)\n");
    let ran = h
        .exec_ok(&id, json!({ "cmd": "python3 /work/app/main.py" }))
        .await;
    assert_eq!(ran["stdout"], "42\n");

    // Binary content: no inline body.
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": id, "path": "/tmp/bin", "content_b64": b64(&[0, 159, 146, 150]) }),
    )
    .await;
    let read = h
        .ok(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/tmp/bin" }),
        )
        .await;
    assert!(read.get("body").is_none());
    assert_eq!(read["size"], 4);
    assert_eq!(h.read_content(&read).await, [0, 159, 146, 150]);

    let made = h
        .ok(
            "sandbox::fs::mkdir",
            json!({ "sandbox_id": id, "path": "/data/a/b", "parents": true }),
        )
        .await;
    assert_eq!(made, json!({ "created": true }));
    let again = h
        .ok(
            "sandbox::fs::mkdir",
            json!({ "sandbox_id": id, "path": "/data/a/b", "parents": true }),
        )
        .await;
    assert_eq!(again, json!({ "created": false }));
    let seen = h.sh(&id, "test -d /data/a/b && echo dir").await;
    assert_eq!(seen["stdout"], "dir\n");

    // Host binds are readable through fs::read.
    let os = h
        .ok(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/etc/os-release" }),
        )
        .await;
    assert!(os["body"].as_str().is_some_and(|b| b.contains("ID=")));
    h.finish().await;
}

#[tokio::test]
async fn fs_ops_cannot_escape_through_guest_symlinks() {
    let h = default_harness().await;
    let id = h.python().await;
    let outside = std::env::temp_dir().join(format!("sandbox-escape-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&outside).expect("host dir");
    std::fs::write(outside.join("secret"), "host secret").expect("host file");
    let link_target = outside.to_string_lossy().into_owned();
    h.exec_ok(
        &id,
        json!({ "argv": ["ln", "-s", link_target, "/tmp/out"] }),
    )
    .await;
    let err = h
        .call(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/tmp/out/secret" }),
        )
        .await
        .expect_err("the link resolves inside the sandbox, where nothing is");
    assert_eq!(s_error(&err)["code"], "S211");
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": id, "path": "/tmp/out/new", "content": "x", "parents": true }),
    )
    .await;
    assert!(!outside.join("new").exists(), "wrote through to the host");
    let err = h
        .call(
            "sandbox::fs::read",
            json!({ "sandbox_id": id, "path": "/../../../../proc/1/environ" }),
        )
        .await
        .expect_err("proc is not reachable from the host side");
    assert_eq!(s_error(&err)["code"], "S215");
    let _ = std::fs::remove_dir_all(&outside);
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Isolation and persistence
// ---------------------------------------------------------------------------

#[tokio::test]
async fn sandboxes_are_private_persistent_and_gone_after_stop() {
    let h = default_harness().await;
    let a = h.create(json!({ "image": "node", "name": "a" })).await;
    let b = h.create(json!({ "image": "node", "name": "b" })).await;
    let mut live = h.double().live();
    live.sort();
    let mut want = vec![
        (a.clone(), Some("a".to_string())),
        (b.clone(), Some("b".to_string())),
    ];
    want.sort();
    assert_eq!(live, want);

    let write = "mkdir -p /node_modules/pkg /newdir && echo x > /tmp/x && echo 'module.exports = 42' > /node_modules/pkg/index.js && echo n > /newdir/f";
    let out = h.sh(&a, write).await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let read = "cat /tmp/x /node_modules/pkg/index.js /newdir/f";

    // Persisted for later execs of the same sandbox.
    let out = h.sh(&a, read).await;
    assert_eq!(out["stdout"], "x\nmodule.exports = 42\nn\n");
    let out = h
        .exec_ok(
            &a,
            json!({ "argv": ["node", "-e", "console.log(require('pkg'))"] }),
        )
        .await;
    assert_eq!(out["stdout"], "42\n", "{out}");

    // Invisible to the other sandbox.
    for path in ["/tmp/x", "/node_modules/pkg/index.js", "/newdir/f"] {
        let out = h.exec_ok(&b, json!({ "argv": ["test", "-e", path] })).await;
        assert_eq!(out["exit_code"], 1, "{path} leaked into another sandbox");
    }
    // And not on the host.
    assert!(!std::path::Path::new("/node_modules/pkg/index.js").exists());
    assert!(!std::path::Path::new("/newdir/f").exists());

    // Gone after stop: a new sandbox does not see them, nor does the host.
    let scratch = scratch_of(&a);
    assert!(scratch.join("newdir/f").is_file());
    h.ok("sandbox::stop", json!({ "sandbox_id": a })).await;
    assert!(!scratch.exists());
    let c = h.create(json!({ "image": "node" })).await;
    let out = h.sh(&c, read).await;
    assert_ne!(out["exit_code"], 0);
    assert_eq!(out["stdout"], "");
    h.finish().await;
}

/// The image rootfs is one writable layer shared by every sandbox of the
/// image, as on the daemon (its cached rootfs, no overlay per sandbox):
/// writes under /usr, /etc, /opt, /root are seen by the image's other
/// sandboxes, present and future, through exec and fs ops alike; never by
/// another image's, never on the host. /tmp and new top-level directories
/// stay private.
#[tokio::test]
async fn image_rootfs_is_shared_per_image_and_spares_the_host() {
    let h = default_harness().await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let a = h.python().await;
    let b = h.python().await;
    let node = h.create(json!({ "image": "node" })).await;

    let plant = format!(
        "mkdir -p /opt/sdk-{tag} /newtop && echo opt > /opt/sdk-{tag}/marker \
         && echo usr > /usr/local/lib/scr-{tag} && echo etc > /etc/scr-{tag} \
         && echo root > /root/.scr-{tag} && echo tmp > /tmp/t && echo new > /newtop/f"
    );
    let out = h.sh(&a, &plant).await;
    assert_eq!(
        out["exit_code"], 0,
        "writes into the image rootfs succeed: {out}"
    );
    let shared = format!(
        "cat /opt/sdk-{tag}/marker /usr/local/lib/scr-{tag} /etc/scr-{tag} /root/.scr-{tag}"
    );
    let out = h.sh(&b, &shared).await;
    assert_eq!(out["stdout"], "opt\nusr\netc\nroot\n", "{out}");
    for private in ["/tmp/t", "/newtop/f"] {
        let out = h
            .exec_ok(&b, json!({ "argv": ["test", "-e", private] }))
            .await;
        assert_eq!(
            out["exit_code"], 1,
            "{private} leaked into a sibling sandbox"
        );
    }
    let out = h.sh(&node, &shared).await;
    assert_eq!(
        out["stdout"], "",
        "another image saw the python layer: {out}"
    );
    for host in [
        format!("/opt/sdk-{tag}"),
        format!("/usr/local/lib/scr-{tag}"),
        format!("/etc/scr-{tag}"),
        format!("/root/.scr-{tag}"),
    ] {
        assert!(
            !std::path::Path::new(&host).exists(),
            "{host} reached the host"
        );
    }

    // fs ops read and write the same layer: a module planted in the system
    // site-packages by fs::write is importable from the other sandbox.
    let read = h
        .ok(
            "sandbox::fs::read",
            json!({ "sandbox_id": b, "path": format!("/opt/sdk-{tag}/marker") }),
        )
        .await;
    assert_eq!(read["body"], "opt\n");
    let module = format!("/usr/lib/python3/dist-packages/scr_{tag}.py");
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": b, "path": module, "content": "VALUE = 7\n" }),
    )
    .await;
    assert!(
        !std::path::Path::new(&module).exists(),
        "fs::write reached the host"
    );
    let out = h
        .exec_ok(
            &a,
            json!({ "argv": ["python3", "-c", format!("import scr_{tag}; print(scr_{tag}.VALUE)")] }),
        )
        .await;
    assert_eq!(out["stdout"], "7\n", "{out}");

    // The layer outlives its sandboxes, and deletions are shared too,
    // without touching the host's file.
    h.ok("sandbox::stop", json!({ "sandbox_id": a })).await;
    h.ok("sandbox::stop", json!({ "sandbox_id": b })).await;
    let c = h.python().await;
    let out = h
        .sh(&c, &format!("cat /opt/sdk-{tag}/marker && rm /usr/bin/env"))
        .await;
    assert_eq!(out["stdout"], "opt\n", "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    let d = h.python().await;
    let out = h
        .exec_ok(&d, json!({ "argv": ["test", "-e", "/usr/bin/env"] }))
        .await;
    assert_eq!(out["exit_code"], 1, "the deletion is seen by the image");
    let err = h
        .call(
            "sandbox::fs::read",
            json!({ "sandbox_id": d, "path": "/usr/bin/env" }),
        )
        .await
        .expect_err("deleted in the layer");
    assert_eq!(s_error(&err)["code"], "S211");
    assert!(
        std::path::Path::new("/usr/bin/env").exists(),
        "host file deleted"
    );
    let out = h
        .exec_ok(&node, json!({ "argv": ["test", "-e", "/usr/bin/env"] }))
        .await;
    assert_eq!(out["exit_code"], 0, "another image lost a file");
    h.finish().await;
}

#[tokio::test]
async fn guests_see_only_their_own_process_tree() {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h
        .sh(&id, "echo $$ $PPID; ls /proc | grep -c '^[0-9]'")
        .await;
    let stdout = out["stdout"].as_str().unwrap_or_default().to_string();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("2 1"), "{stdout}");
    let count: u32 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(99);
    assert!(count <= 6, "the guest sees host processes: {stdout}");
    h.finish().await;
}

/// Connects to the engine's port (on the host's 127.0.0.1) through the
/// sandbox gateway from inside a sandbox; prints the outcome.
/// Python that dials the host's 127.0.0.1:`port` through the gateway this
/// host's double gives guests (slirp4netns' 10.0.2.2, or 127.0.0.1 itself
/// where the double shares the host's network).
fn connect_probe(port: u16) -> String {
    let gateway = code_runner_conformance::standin::sandbox_double::network::gateway();
    format!(
        "import socket\ntry:\n    socket.create_connection(('{gateway}', {port}), 5)\n    print('connected')\nexcept OSError as e:\n    print('refused')"
    )
}

#[tokio::test]
async fn only_network_true_sandboxes_reach_the_engine() {
    let h = default_harness().await;
    let port = h.engine.as_ref().map(|e| e.addr().port()).expect("engine");
    let online = h
        .create(json!({ "image": "python", "network": true }))
        .await;
    let out = h
        .exec_ok(
            &online,
            json!({ "argv": ["python3", "-c", connect_probe(port)] }),
        )
        .await;
    assert_eq!(out["stdout"], "connected\n", "{out}");

    // network:false (the default, and what sandbox::run uses) has no route
    // to the host, as a VM without a network device.
    let offline = h.python().await;
    let out = h
        .exec_ok(
            &offline,
            json!({ "argv": ["python3", "-c", connect_probe(port)] }),
        )
        .await;
    assert_eq!(out["stdout"], "refused\n", "{out}");
    let run = h
        .ok(
            "sandbox::run",
            json!({ "image": "python", "lang": "python", "code": connect_probe(port) }),
        )
        .await;
    assert_eq!(run["stdout"], "refused\n", "{run}");
    // Its own loopback still works.
    let echo = "import socket\ns=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\nc=socket.create_connection(s.getsockname()); print('loopback ok')";
    let out = h
        .exec_ok(&offline, json!({ "argv": ["python3", "-c", echo] }))
        .await;
    assert_eq!(out["stdout"], "loopback ok\n", "{out}");
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Reaping
// ---------------------------------------------------------------------------

fn reaping_limits() -> SandboxLimits {
    SandboxLimits {
        default_idle_timeout_secs: 1,
        reaper_interval_ms: 200,
        ..SandboxLimits::default()
    }
}

#[tokio::test]
async fn idle_sandboxes_are_reaped_then_unknown() {
    let h = harness(reaping_limits()).await;
    let created = Instant::now();
    let id = h.python().await;
    let scratch = scratch_of(&id);
    // sandbox::list does not reset the idle clock, so polling it is safe.
    let reaped = wait_for(Duration::from_secs(15), || async {
        h.listed_entry(&id).await.is_none()
    })
    .await;
    assert!(reaped, "never reaped");
    assert!(
        created.elapsed() > Duration::from_secs(1),
        "reaped before idle_timeout_secs elapsed"
    );
    assert!(!scratch.exists());
    let err = h
        .exec(&id, json!({ "cmd": "true" }))
        .await
        .expect_err("S002");
    assert_s(
        &err,
        "S002",
        &format!("sandbox not found: {id}"),
        Value::Null,
        Some(NOTE_GONE),
    );
    h.finish().await;
}

#[tokio::test]
async fn an_exec_in_flight_protects_from_reaping() {
    let h = harness(reaping_limits()).await;
    let id = h
        .create(json!({ "image": "python", "idle_timeout_secs": 1 }))
        .await;
    // Runs 3x the idle timeout; a reap would kill it (S300).
    let out = h
        .exec_ok(&id, json!({ "argv": ["sleep", "3"], "timeout_ms": 20_000 }))
        .await;
    assert_eq!(out["exit_code"], 0);
    assert!(
        h.listed_entry(&id).await.is_some(),
        "reaped right after its exec"
    );
    let reaped = wait_for(Duration::from_secs(15), || async {
        h.listed_entry(&id).await.is_none()
    })
    .await;
    assert!(reaped, "idle after the exec, it is reaped");
    h.finish().await;
}

#[tokio::test]
async fn fs_ops_reset_the_idle_clock_list_does_not() {
    let h = harness(reaping_limits()).await;
    let busy = h
        .create(json!({ "image": "python", "idle_timeout_secs": 2 }))
        .await;
    let idle = h
        .create(json!({ "image": "python", "idle_timeout_secs": 2 }))
        .await;
    let keepalive = {
        let caller = h.caller.clone();
        let busy = busy.clone();
        tokio::spawn(async move {
            loop {
                let _ = caller
                    .trigger(TriggerRequest {
                        function_id: "sandbox::fs::write".into(),
                        payload: json!({ "sandbox_id": busy, "path": "/tmp/beat", "content": "." }),
                        action: None,
                        timeout_ms: Some(10_000),
                    })
                    .await;
                // The pause is the behaviour under test: fs activity every
                // 200 ms, well inside the 2 s idle timeout.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let reaped = wait_for(Duration::from_secs(20), || async {
        h.listed_entry(&idle).await.is_none()
    })
    .await;
    assert!(reaped, "the sandbox only listed was never reaped");
    assert!(
        h.listed_entry(&busy).await.is_some(),
        "fs activity did not keep its sandbox alive"
    );
    keepalive.abort();
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Exec behaviour
// ---------------------------------------------------------------------------

#[tokio::test]
async fn exec_response_shape_and_exit_codes() {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h.exec_ok(&id, json!({ "cmd": "echo hello" })).await;
    let keys: Vec<&str> = out
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let mut keys = keys;
    keys.sort();
    assert_eq!(
        keys,
        [
            "duration_ms",
            "exit_code",
            "stderr",
            "stdout",
            "success",
            "timed_out"
        ]
    );
    assert_eq!(out["stdout"], "hello\n");
    assert_eq!(out["stderr"], "");
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["success"], true);
    assert_eq!(out["timed_out"], false);
    assert!(out["duration_ms"].is_u64());

    let out = h.sh(&id, "echo err >&2; exit 3").await;
    assert_eq!(
        (
            out["exit_code"].clone(),
            out["success"].clone(),
            out["stderr"].clone()
        ),
        (json!(3), json!(false), json!("err\n"))
    );
    let out = h.sh(&id, "kill -TERM $$").await;
    assert_eq!(out["exit_code"], 143, "killed by a signal: 128+signal");
    let out = h.sh(&id, "kill -KILL $$").await;
    assert_eq!(out["exit_code"], 137);
    h.finish().await;
}

#[rstest]
#[case(json!({ "cmd": "definitely-not-a-binary" }), 127, "exec: definitely-not-a-binary: not found\n")]
#[case(json!({ "cmd": "/nope/bin/x --flag" }), 127, "exec: /nope/bin/x: not found\n")]
#[case(json!({ "cmd": "echo", "workdir": "/does/not/exist" }), 127, "exec: echo: not found\n")]
#[case(json!({ "cmd": "/tmp" }), 126, "exec: /tmp: permission denied\n")]
#[case(json!({ "cmd": "/tmp/script.sh" }), 126, "exec: /tmp/script.sh: permission denied\n")]
#[tokio::test]
async fn synthetic_127_and_126(#[case] req: Value, #[case] code: i64, #[case] stderr: &str) {
    let h = default_harness().await;
    let id = h.python().await;
    h.ok(
        "sandbox::fs::write",
        json!({ "sandbox_id": id, "path": "/tmp/script.sh", "content": "#!/bin/sh\necho hi\n", "mode": "0644" }),
    )
    .await;
    let out = h.exec_ok(&id, req).await;
    assert_eq!(out["exit_code"], code);
    assert_eq!(out["stderr"], stderr);
    assert_eq!(out["stdout"], "");
    assert_eq!(out["success"], false);
    assert_eq!(out["timed_out"], false);
    h.finish().await;
}

#[rstest]
#[case(json!({ "cmd": "echo a b" }), "a b\n")]
#[case(json!({ "cmd": "echo", "args": ["a", "b"] }), "a b\n")]
#[case(json!({ "argv": ["echo", "a", "b"] }), "a b\n")]
#[case(json!({ "cmd": "echo 'a  b' \"c\"" }), "a  b c\n")]
#[case(json!({ "cmd": "echo $HOME | cat" }), "$HOME | cat\n")]
#[case(json!({ "cmd": "/bin/echo x" }), "x\n")]
#[case(json!({ "cmd": "pwd" }), "/\n")]
#[case(json!({ "cmd": "pwd", "workdir": "/tmp" }), "/tmp\n")]
#[case(json!({ "cmd": "python3 -c 'import sys; print(sys.argv[1:])' a 'b c'" }), "['a', 'b c']\n")]
#[case(json!({ "argv": ["node", "-e", "console.log(1+1)"] }), "2\n")]
#[tokio::test]
async fn command_shapes(#[case] req: Value, #[case] stdout: &str) {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h.exec_ok(&id, req).await;
    assert_eq!(out["stdout"], stdout, "{out}");
    assert_eq!(out["exit_code"], 0);
    h.finish().await;
}

#[tokio::test]
async fn stdin_is_base64_and_defaults_to_eof() {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h
        .exec_ok(
            &id,
            json!({ "argv": ["python3", "-c", "import sys; print(sys.stdin.read().upper(), end='')"], "stdin": b64(b"hello\nworld\n") }),
        )
        .await;
    assert_eq!(out["stdout"], "HELLO\nWORLD\n");
    for stdin in [json!(null), json!("")] {
        let mut req = json!({ "cmd": "cat", "timeout_ms": 10_000 });
        if !stdin.is_null() {
            req["stdin"] = stdin;
        }
        let out = h.exec_ok(&id, req).await;
        assert_eq!(out["stdout"], "");
        assert_eq!(out["exit_code"], 0);
    }
    h.finish().await;
}

#[tokio::test]
async fn env_is_inherited_and_layered() {
    let h = default_harness().await;
    let list = h
        .create(json!({ "image": "python", "env": ["A=1", "B=2", "URL=ws://localhost:49134"] }))
        .await;
    let map = h
        .create(json!({ "image": "python", "env": { "A": "x", "B": "y" } }))
        .await;
    let show = "echo \"$A|$B|$C|$HOME|$URL\"";
    let out = h.sh(&list, show).await;
    assert_eq!(out["stdout"], "1|2||/root|ws://localhost:49134\n");
    let out = h
        .exec_ok(
            &list,
            json!({ "argv": ["sh", "-c", show], "env": { "B": "3", "C": "4" } }),
        )
        .await;
    assert_eq!(out["stdout"], "1|3|4|/root|ws://localhost:49134\n");
    let out = h
        .exec_ok(&list, json!({ "argv": ["sh", "-c", show], "env": ["C=5"] }))
        .await;
    assert_eq!(
        out["stdout"], "1|2|5|/root|ws://localhost:49134\n",
        "exec env does not stick"
    );
    let out = h.sh(&map, show).await;
    assert_eq!(out["stdout"], "x|y||/root|\n");
    let out = h.sh(&map, "echo $PATH").await;
    assert_eq!(
        out["stdout"],
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    );
    h.finish().await;
}

#[tokio::test]
async fn network_true_rewrites_loopback_urls_in_create_env_only() {
    let gateway = code_runner_conformance::standin::sandbox_double::network::gateway();
    let h = default_harness().await;
    let id = h
        .create(json!({
            "image": "node",
            "network": true,
            "env": { "U": "ws://localhost:49134", "V": "http://localhost/", "W": "http://127.0.0.1:8080/x" }
        }))
        .await;
    let out = h
        .exec_ok(
            &id,
            json!({ "argv": ["sh", "-c", "echo \"$U $V $W $X\""], "env": { "X": "ws://localhost:1" } }),
        )
        .await;
    assert_eq!(
        out["stdout"],
        format!(
            "ws://{gateway}:49134 http://localhost/ http://{gateway}:8080/x ws://localhost:1\n"
        ),
        "the daemon's gateway (slirp4netns' 10.0.2.2) replaces loopback hosts"
    );
    h.finish().await;
}

#[tokio::test]
async fn each_stream_is_cut_at_one_mib() {
    let h = default_harness().await;
    let id = h.python().await;
    let script = "import sys; sys.stdout.write('x' * (3 * 1024 * 1024)); sys.stderr.write('y' * (1024 * 1024 + 7))";
    let out = h
        .exec_ok(&id, json!({ "argv": ["python3", "-c", script] }))
        .await;
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["stdout"].as_str().map(str::len), Some(1_048_576));
    assert_eq!(out["stderr"].as_str().map(str::len), Some(1_048_576));
    assert!(out.get("stdout_truncated").is_none());
    h.finish().await;
}

/// Writes `files` (path → content) into a sandbox with `sandbox::fs::write`.
async fn plant(h: &Harness, id: &str, files: &[(&str, &str)]) {
    for (path, content) in files {
        h.ok(
            "sandbox::fs::write",
            json!({ "sandbox_id": id, "path": path, "content": content, "parents": true }),
        )
        .await;
    }
}

#[tokio::test]
async fn an_exec_runs_as_root_in_slash_with_the_daemons_env_whatever_the_image() {
    // The daemon boots a sandbox from the preset image's rootfs, but an exec
    // is spawned by its in-VM init as root, in `/`, with the create env and
    // a default PATH: the Dockerfile's USER, WORKDIR and ENV do not apply.
    let h = default_harness().await;
    for image in ["python", "node"] {
        let id = h
            .create(json!({ "image": image, "env": { "FROM_CREATE": "yes" } }))
            .await;
        let out = h
            .sh(
                &id,
                "id -u; pwd; echo \"$PATH|$FROM_CREATE|${PYTHONUNBUFFERED-unset}|${NODE_ENV-unset}\"",
            )
            .await;
        assert_eq!(
            out["stdout"],
            "0\n/\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|yes|unset|unset\n",
            "{image}: {out}"
        );
        let home = if image == "python" {
            "python-user"
        } else {
            "node"
        };
        let out = h
            .sh(&id, &format!("test -d /home/{home}/work && echo home"))
            .await;
        assert_eq!(out["stdout"], "home\n", "{image}: {out}");
    }
    h.finish().await;
}

#[tokio::test]
async fn a_plain_pip_install_lands_in_the_python_image_for_every_sandbox() {
    let h = default_harness().await;
    let probe = h.python().await;
    let pip = h
        .exec_ok(&probe, json!({ "cmd": "python3 -m pip --version" }))
        .await;
    if pip["exit_code"] != 0 {
        eprintln!("skipped: this host's python3 has no pip (apt-get install python3-pip): {pip}");
        h.finish().await;
        return;
    }
    let name = format!("cfpkg{:08x}", rand::random::<u32>());
    let a = h.python().await;
    plant(
        &h,
        &a,
        &[
            (&format!("/tmp/src/{name}/__init__.py"), "VALUE = 42\n"),
            (
                "/tmp/src/setup.py",
                &format!("from setuptools import setup\nsetup(name='{name}', version='1.0', packages=['{name}'])\n"),
            ),
        ],
    )
    .await;
    // No PEP 668 refusal, no --break-system-packages, no --user: as on
    // python:3.12-slim (offline: the package is local, setuptools the host's).
    let out = h
        .exec_ok(
            &a,
            json!({ "cmd": "python3 -m pip install --no-index --no-build-isolation /tmp/src" }),
        )
        .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    // A later sandbox of the image imports it; a node sandbox does not.
    let b = h.python().await;
    let script = format!("import {name}; print({name}.VALUE)");
    let out = h
        .exec_ok(&b, json!({ "argv": ["python3", "-c", script] }))
        .await;
    assert_eq!(out["stdout"], "42\n", "{out}");
    let n = h.create(json!({ "image": "node" })).await;
    let out = h
        .exec_ok(&n, json!({ "argv": ["python3", "-c", script] }))
        .await;
    assert_ne!(
        out["exit_code"], 0,
        "the node image shares python's layer: {out}"
    );
    h.finish().await;
}

#[tokio::test]
async fn npm_install_global_lands_in_the_node_image_for_every_sandbox() {
    let h = default_harness().await;
    let name = format!("cfpkg{:08x}", rand::random::<u32>());
    let a = h.create(json!({ "image": "node" })).await;
    plant(
        &h,
        &a,
        &[
            (
                "/tmp/src/package.json",
                &format!("{{\"name\":\"{name}\",\"version\":\"1.0.0\",\"bin\":{{\"{name}\":\"cli.js\"}}}}"),
            ),
            (
                "/tmp/src/cli.js",
                "#!/usr/bin/env node\nconsole.log('global ok');\n",
            ),
        ],
    )
    .await;
    let out = h
        .exec_ok(
            &a,
            json!({ "argv": ["npm", "install", "-g", "--offline", "--no-audit", "--no-fund", "--install-links", "/tmp/src"] }),
        )
        .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let b = h.create(json!({ "image": "node" })).await;
    let out = h.exec_ok(&b, json!({ "cmd": name.clone() })).await;
    assert_eq!(out["stdout"], "global ok\n", "{out}");
    let p = h.python().await;
    let out = h.exec_ok(&p, json!({ "cmd": name })).await;
    assert_eq!(
        out["exit_code"], 127,
        "the python image shares node's layer: {out}"
    );
    h.finish().await;
}

#[tokio::test]
async fn python_has_pip_and_node_runs() {
    let h = default_harness().await;
    let id = h.python().await;
    let out = h
        .exec_ok(&id, json!({ "cmd": "python3 -m pip --version" }))
        .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let out = h
        .exec_ok(
            &id,
            json!({ "cmd": "python3 -c 'import sys; print(sys.executable)'" }),
        )
        .await;
    assert_eq!(out["stdout"], "/usr/bin/python3\n");
    h.finish().await;
}

#[tokio::test]
async fn boot_delay_is_paid_by_the_first_call_only() {
    let h = harness(SandboxLimits {
        boot_delay_ms: 1_500,
        ..SandboxLimits::default()
    })
    .await;
    let t = Instant::now();
    let id = h.python().await;
    assert!(
        t.elapsed() < Duration::from_millis(1_500),
        "create waits for boot"
    );
    let t = Instant::now();
    h.exec_ok(&id, json!({ "cmd": "true" })).await;
    assert!(
        t.elapsed() >= Duration::from_millis(1_400),
        "first exec skipped boot"
    );
    let t = Instant::now();
    h.exec_ok(&id, json!({ "cmd": "true" })).await;
    assert!(
        t.elapsed() < Duration::from_millis(1_500),
        "boot paid twice"
    );
    h.finish().await;
}

// ---------------------------------------------------------------------------
// list, catalog, run
// ---------------------------------------------------------------------------

#[tokio::test]
async fn list_and_catalog_shapes() {
    let h = default_harness().await;
    let id = h.create(json!({ "image": "node", "name": "web" })).await;
    let entry = h.listed_entry(&id).await.expect("listed");
    let mut keys: Vec<String> = entry
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    assert_eq!(
        keys,
        [
            "age_secs",
            "exec_in_flight",
            "exec_in_progress",
            "exec_slots_free",
            "image",
            "name",
            "sandbox_id",
            "stopped"
        ]
    );
    assert_eq!(entry["name"], "web");
    assert_eq!(entry["image"], "node");
    assert_eq!(entry["exec_slots_free"], 4);
    assert_eq!(entry["stopped"], false);
    let catalog = h.ok("sandbox::catalog::list", json!({})).await;
    assert_eq!(
        catalog,
        json!({ "images": [
            { "name": "python", "oci_ref": "docker.io/iiidev/python:latest", "kind": "preset" },
            { "name": "node", "oci_ref": "docker.io/iiidev/node:latest", "kind": "preset" },
        ]})
    );
    h.finish().await;
}

#[tokio::test]
async fn run_creates_executes_and_stops() {
    let h = default_harness().await;
    let out = h
        .ok(
            "sandbox::run",
            json!({ "image": "python", "lang": "python", "code": "print(2+2)" }),
        )
        .await;
    assert_eq!(out["stdout"], "4\n");
    assert_eq!(out["exit_code"], 0);
    assert!(out.get("sandbox_id").is_none());
    assert!(h.double().live().is_empty(), "run left a sandbox behind");

    let out = h
        .ok(
            "sandbox::run",
            json!({
                "image": "node", "lang": "node", "keep_sandbox": true,
                "code": "console.log(require('/app/lib.js').v)",
                "files": [{ "path": "/app/lib.js", "content": "exports.v = 7" }]
            }),
        )
        .await;
    assert_eq!(out["stdout"], "7\n", "{out}");
    let kept = out["sandbox_id"]
        .as_str()
        .expect("kept sandbox id")
        .to_string();
    assert_eq!(h.double().live().len(), 1);
    let shell = h
        .ok(
            "sandbox::run",
            json!({ "image": "python", "lang": "shell", "code": "echo $((6*7)) | cat" }),
        )
        .await;
    assert_eq!(shell["stdout"], "42\n");
    h.ok("sandbox::stop", json!({ "sandbox_id": kept })).await;
    h.finish().await;
}

#[tokio::test]
async fn run_errors_name_their_step() {
    let h = default_harness().await;
    let err = h
        .call(
            "sandbox::run",
            json!({ "image": "ubuntu", "lang": "python", "code": "1" }),
        )
        .await
        .expect_err("S100");
    assert_s(
        &err,
        "S100",
        "during sandbox::run step `create` (sandbox_id=): image 'ubuntu' not in catalog; valid presets are 'python' and 'node', or add a custom image via worker config (see S100 docs)",
        json!({ "context": "during sandbox::run step `create`", "inner_code": "S100", "sandbox_id": "" }),
        None,
    );
    let err = h
        .call(
            "sandbox::run",
            json!({ "image": "python", "lang": "python", "code": "import time; time.sleep(30)", "timeout_ms": 300 }),
        )
        .await
        .expect_err("S200");
    let v = s_error(&err);
    assert_eq!(v["code"], "S200");
    let sid = v["fix"]["sandbox_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        v["message"],
        format!("during sandbox::run step `exec` (sandbox_id={sid}): exec timed out after 300 ms")
    );
    assert_eq!(v["fix"]["context"], "during sandbox::run step `exec`");
    assert!(v["fix_note"].is_null());
    assert!(
        h.double().live().is_empty(),
        "a failed run stops its sandbox"
    );
    h.finish().await;
}

// ---------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------

#[tokio::test]
async fn shutdown_stops_every_sandbox_and_process() {
    let h = default_harness().await;
    let a = h.python().await;
    let b = h.python().await;
    let (marker, running) = h.sleeping(&a).await;
    h.finish().await;
    assert_eq!(pids_with(&marker), Vec::<String>::new());
    assert!(!scratch_of(&a).exists());
    assert!(!scratch_of(&b).exists());
    running.abort();
}

#[tokio::test]
async fn dropping_the_double_without_shutdown_still_cleans_up() {
    let mut h = default_harness().await;
    let id = h.python().await;
    let (marker, running) = h.sleeping(&id).await;
    drop(h.double.take());
    assert_eq!(pids_with(&marker), Vec::<String>::new());
    assert!(!scratch_of(&id).exists());
    running.abort();
    h.finish().await;
}

#[tokio::test]
async fn start_fails_clearly_without_an_engine() {
    // Nothing listens on port 1.
    let err = SandboxDouble::start("ws://127.0.0.1:1", SandboxLimits::default())
        .await
        .err()
        .expect("no engine, no double");
    let text = err.to_string();
    assert!(
        text.starts_with("cannot register `iii-sandbox` with the engine at ws://127.0.0.1:1: "),
        "{text}"
    );
}
