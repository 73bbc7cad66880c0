//! `StreamTo` against a fake VM that answers as `tee.sh` and `follow.sh`
//! would: which execs a streamed run costs, and that every byte reaches the
//! caller once, in order.

use super::*;
use crate::bus::{BusError, FrameWriter};
use std::pin::Pin;

/// A writer that takes every frame, and says when the end frame came.
struct Taken(Arc<Mutex<Vec<serde_json::Value>>>, Arc<tokio::sync::Notify>);

impl FrameWriter for Taken {
    fn send(
        &self,
        text: String,
    ) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
        let frame: serde_json::Value = serde_json::from_str(&text).unwrap();
        let end = frame["type"] == "end";
        self.0.lock().unwrap().push(frame);
        if end {
            self.1.notify_one();
        }
        Box::pin(async { Ok(()) })
    }
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

type Exec = Box<
    dyn Fn(ExecParams) -> Pin<Box<dyn Future<Output = Result<ExecOutput, SandboxError>> + Send>>
        + Send
        + Sync,
>;

/// A VM as `tee.sh` and `follow.sh` make it: the run's exec answers
/// with its output decoded as the daemon decodes it, the copy holds
/// the raw bytes (or nothing: `copy` false). A `slow` run has written
/// `early` of its stdout when a follower first looks, and answers once
/// one has read it.
struct Vm {
    out: &'static [u8],
    err: &'static [u8],
    copy: bool,
    slow: Option<usize>,
    execs: Mutex<Vec<String>>,
    looked: tokio::sync::Notify,
    ended: std::sync::atomic::AtomicBool,
    /// Its copies are an earlier exec's (this one could not make its own).
    stale: std::sync::atomic::AtomicBool,
    /// Its answers are cut at the daemon's 1 MiB.
    cuts: std::sync::atomic::AtomicBool,
}

fn vm(out: &'static [u8], err: &'static [u8], copy: bool, slow: Option<usize>) -> Arc<Vm> {
    Arc::new(Vm {
        out,
        err,
        copy,
        slow,
        execs: Mutex::default(),
        looked: tokio::sync::Notify::new(),
        ended: Default::default(),
        stale: Default::default(),
        cuts: Default::default(),
    })
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn answer(stdout: String, stderr: String) -> Result<ExecOutput, SandboxError> {
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code: Some(0),
        duration_ms: 1,
    })
}

fn exec_of(vm: &Arc<Vm>) -> Exec {
    let vm = vm.clone();
    Box::new(move |p: ExecParams| {
        let vm = vm.clone();
        Box::pin(async move {
            let cap = |s: &[u8]| {
                let mut s = String::from_utf8_lossy(s).into_owned();
                if vm.cuts.load(std::sync::atomic::Ordering::SeqCst) {
                    s.truncate(DAEMON.stream_cap_bytes.value);
                }
                s
            };
            if p.argv[0] == "tail" {
                vm.execs.lock().unwrap().push("tail".into());
                let copy = if vm.stale.load(std::sync::atomic::Ordering::SeqCst) {
                    &b"an earlier exec's output\n"[..]
                } else if p.argv[3].ends_with("/1") {
                    vm.out
                } else {
                    vm.err
                };
                let from: usize = p.argv[2][1..].parse().unwrap();
                return answer(cap(copy.get(from - 1..).unwrap_or_default()), String::new());
            }
            if p.argv[2] != FOLLOW_SH {
                vm.execs.lock().unwrap().push("run".into());
                if vm.slow.is_some() {
                    vm.looked.notified().await;
                    // It goes on a while (paused time) after it was read.
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                vm.ended.store(true, std::sync::atomic::Ordering::SeqCst);
                return answer(cap(vm.out), cap(vm.err));
            }
            vm.execs.lock().unwrap().push("follow".into());
            if !vm.copy {
                return answer(String::new(), String::new());
            }
            let ended = vm.ended.load(std::sync::atomic::Ordering::SeqCst);
            let out = if ended {
                vm.out
            } else {
                &vm.out[..vm.slow.unwrap_or(0)]
            };
            let err = if ended { vm.err } else { &[][..] };
            let seen: (usize, usize) = (p.argv[6].parse().unwrap(), p.argv[7].parse().unwrap());
            let mut lines = String::new();
            if seen.0 < out.len() {
                lines.push_str(&format!("1 {}\n", b64(&out[seen.0..])));
            }
            if seen.1 < err.len() {
                lines.push_str(&format!("2 {}\n", b64(&err[seen.1..])));
            }
            if ended {
                lines.push_str("end\n");
            }
            vm.looked.notify_one();
            if lines.is_empty() {
                // Nothing new: it waits out its polls, as follow.sh does.
                let polls: u64 = p.argv[8].parse().unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20 * polls)).await;
            }
            answer(lines, String::new())
        })
    })
}

async fn streamed(vm: &Arc<Vm>) -> (ExecOutput, Vec<serde_json::Value>) {
    let frames = Arc::new(Mutex::new(Vec::new()));
    let ended = Arc::new(tokio::sync::Notify::new());
    let sink = Arc::new(Sink::start(
        Box::new(Taken(frames.clone(), ended.clone())),
        std::time::Duration::from_secs(5),
    ));
    let to = StreamTo::new(sink.clone());
    let p = ExecParams {
        argv: vec!["python3".into()],
        ..ExecParams::default()
    };
    let out = to.run(p, exec_of(vm)).await.unwrap();
    sink.end(serde_json::json!({}));
    drop(to);
    drop(sink);
    let came = tokio::time::timeout(std::time::Duration::from_secs(5), ended.notified()).await;
    assert!(came.is_ok(), "the end frame came, after every data frame");
    let taken = frames.lock().unwrap().clone();
    (out, taken)
}

fn text(frames: &[serde_json::Value], kind: &str) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == kind)
        .map(|f| f["data"].as_str().unwrap().to_string())
        .collect()
}

const OUT: &[u8] = b"hi\nthere\n\n\x1eSCR1 s result 1\n";

/// A run that ends before a follower looks costs no follower: its
/// frames come from its answer (the worker's line left out), and the
/// answer is what it would be unstreamed.
#[tokio::test(start_paused = true)]
async fn a_short_run_is_streamed_from_its_answer() {
    let vm = vm(OUT, b"warn\n", true, None);
    let (answered, frames) = streamed(&vm).await;
    assert_eq!(answered.stdout.as_bytes(), OUT);
    assert_eq!(
        (text(&frames, "stdout"), text(&frames, "stderr")),
        ("hi\nthere\n".to_string(), "warn\n".to_string())
    );
    assert_eq!(*vm.execs.lock().unwrap(), ["run"]);
}

/// What a follower read while the run went on is not sent again when
/// the answer brings the rest.
#[tokio::test(start_paused = true)]
async fn what_followers_read_is_sent_once() {
    let vm = vm(OUT, b"warn\n", true, Some(3));
    let (answered, frames) = streamed(&vm).await;
    assert_eq!(answered.stdout.as_bytes(), OUT);
    assert_eq!(text(&frames, "stdout"), "hi\nthere\n");
    assert_eq!(text(&frames, "stderr"), "warn\n");
    assert_eq!(frames[0]["data"], "hi\n", "the live read came first");
    assert_eq!(vm.execs.lock().unwrap()[..2], ["run", "follow"]);
}

/// Bytes the daemon could not decode reach the caller as they were
/// written (from the copy), not as the answer's U+FFFD.
#[tokio::test(start_paused = true)]
async fn undecodable_bytes_come_from_the_copy() {
    let vm = vm(b"ok \xff\xfe!\n", b"", true, None);
    let (_, frames) = streamed(&vm).await;
    let got: String = text(&frames, "stdout");
    // The framer's own lossy text of the exact bytes: one U+FFFD per
    // bad byte, as a reader of the raw stream would decode it.
    assert_eq!(got, String::from_utf8_lossy(b"ok \xff\xfe!\n"));
    assert_eq!(*vm.execs.lock().unwrap(), ["run", "follow"]);
}

/// Past the daemon's cut of an answer, the rest comes from the copy
/// with one `tail` (no follower exec), every byte once; a copy that is
/// not this exec's (it does not go on from the answer's last bytes) is
/// left to a follower exec, which checks the copy's name.
#[rstest::rstest]
#[case::its_own_copy(false, &["run", "tail"])]
#[case::a_stale_copy(true, &["run", "tail", "follow"])]
#[tokio::test(start_paused = true)]
async fn past_the_daemons_cut_the_copy_is_read(#[case] stale: bool, #[case] calls: &[&str]) {
    static LONG: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        let mut v = b"x".repeat(DAEMON.stream_cap_bytes.value - 3);
        v.extend_from_slice(b"\nthe rest\n");
        v
    });
    let vm = vm(&LONG, b"", true, None);
    vm.cuts.store(true, std::sync::atomic::Ordering::SeqCst);
    vm.stale.store(stale, std::sync::atomic::Ordering::SeqCst);
    let (answered, frames) = streamed(&vm).await;
    assert_eq!(answered.stdout.len(), DAEMON.stream_cap_bytes.value);
    let got = text(&frames, "stdout");
    assert_eq!(got.len(), LONG.len());
    assert!(got.as_bytes() == &LONG[..], "every byte, once, in order");
    assert_eq!(*vm.execs.lock().unwrap(), calls);
}

/// A run whose exec is followed by another (a relay that found no
/// interpreter, then a cold exec) streams the second one live too: what
/// its follower read is sent while it runs, not held with the first
/// exec's answer until the run ends.
#[tokio::test(start_paused = true)]
async fn a_runs_second_exec_streams_live() {
    let (tx, mut sent) = tokio::sync::mpsc::unbounded_channel();
    let sink = Arc::new(Sink::start(
        Box::new(crate::stream::testing::Noted(tx)),
        std::time::Duration::from_secs(30),
    ));
    let to = StreamTo::new(sink.clone());
    let p = ExecParams {
        argv: vec!["python3".into()],
        ..ExecParams::default()
    };
    to.run(p.clone(), exec_of(&vm(b"first\n", b"", true, None)))
        .await
        .unwrap();
    to.run(p, exec_of(&vm(b"early\nlate\n", b"", true, Some(6))))
        .await
        .unwrap();
    let mut before_the_end = String::new();
    while let Ok(frame) = sent.try_recv() {
        before_the_end.push_str(frame["data"].as_str().unwrap_or_default());
    }
    assert!(
        before_the_end.contains("first\nearly\n"),
        "sent while the second exec ran: {before_the_end:?}"
    );
    sink.end(serde_json::json!({}));
}

/// Without a copy, the answer's text is what the caller gets.
#[tokio::test(start_paused = true)]
async fn without_a_copy_the_answer_is_streamed() {
    let vm = vm(b"a\xffb\n", b"e\n", false, None);
    let (answered, frames) = streamed(&vm).await;
    assert_eq!(text(&frames, "stdout"), answered.stdout);
    assert_eq!(text(&frames, "stderr"), "e\n");
}
