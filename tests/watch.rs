//! `sandbox-code-runner::watch` through the whole worker on the hermetic
//! stack: a streamed run's output is readable by the holder of its writer
//! ref while the run still runs, its end once it answered, and by nobody
//! else (a wrong key, an unknown channel, guest code).

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{wait_for, CallError, Harness};
use serde_json::{json, Value};

const RUN: &str = "sandbox-code-runner::run";
const WATCH: &str = "sandbox-code-runner::watch";

/// The text of `stream` in a watch answer's frames.
fn text(answer: &Value, stream: &str) -> String {
    answer["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["type"] == stream)
        .filter_map(|f| f["data"].as_str())
        .collect()
}

fn refused(r: Result<Value, CallError>) -> CallError {
    let e = r.expect_err("refused");
    assert_eq!(e.code, "sandbox-code-runner::invalid_request", "{e:?}");
    e
}

/// A node run prints, then waits on a gate only the test opens (a function
/// the run registers on its own connection). Meanwhile `watch` with the
/// run's writer ref shows what it printed, the run not having answered;
/// once opened, the run answers and `watch` has its end frame. Guest code
/// calling `watch` is refused by the engine (FORBIDDEN).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_streamed_runs_output_is_watched_before_it_answers() {
    let h = Harness::start("").await;
    let channel = iii_sdk::helpers::create_channel(&h.client, None)
        .await
        .expect("engine::channels::create");
    let writer = serde_json::to_value(&channel.writer_ref).unwrap();
    assert_eq!(writer["direction"], "write", "{writer:?}");
    let gate = format!("watchgate{:08x}::open", rand::random::<u32>());
    let code = format!(
        r#"console.log('before the gate');
let probe = 'answered';
try {{ await iii.trigger({{ function_id: '{WATCH}', payload: {{}} }}); }} catch (e) {{ probe = e.code; }}
console.error('guest watch: ' + probe);
let open;
const opened = new Promise((ok) => {{ open = ok; }});
iii.registerFunction('{gate}', async () => {{ open(); return {{ opened: true }}; }});
await opened;
console.log('after the gate');
"#
    );
    let mut run = Box::pin(h.call_with(
        RUN,
        json!({"lang": "node", "code": code, "timeout_ms": 25000, "output": writer}),
        60_000,
    ));

    // Watch until both lines came, the run still unanswered.
    let seen = Mutex::new((String::new(), String::new(), None::<u64>, false));
    let watching = {
        let (h, seen, writer) = (&h, &seen, &writer);
        wait_for(Duration::from_secs(30), move || async move {
            let (after, answered) = {
                let s = seen.lock().unwrap();
                (s.2, s.3)
            };
            let mut payload = json!({"output": writer});
            if let Some(a) = after {
                payload["after"] = json!(a);
            }
            let answer = match h.call(WATCH, payload).await {
                Ok(answer) => answer,
                // The run's request may not have reached the worker yet:
                // its ref is unknown until then, and only then.
                Err(e) if !answered && e.code.ends_with("::invalid_request") => return false,
                Err(e) => panic!("watch answers: {e:?}"),
            };
            assert_eq!(answer["ended"], false, "{answer}");
            assert_eq!(answer["skipped"], 0, "{answer}");
            let mut s = seen.lock().unwrap();
            s.0.push_str(&text(&answer, "stdout"));
            s.1.push_str(&text(&answer, "stderr"));
            s.2 = answer["next"].as_u64().or(after);
            s.3 = true;
            s.0.contains("before the gate") && s.1.contains("guest watch")
        })
    };
    let watched = tokio::select! {
        answered = &mut run => panic!("the run answered before its output was watched: {answered:?}"),
        watched = watching => watched,
    };
    let (out, err, after, _) = seen.into_inner().unwrap();
    assert!(
        watched,
        "watch never showed the run's output: {out:?} {err:?}; log:\n{}",
        h.log()
    );
    assert_eq!(out, "before the gate\n");
    assert_eq!(err, "guest watch: FORBIDDEN\n", "guest code cannot watch");

    // The gate is open once the run's registration is live.
    let opened = {
        let (h, gate) = (&h, &gate);
        wait_for(Duration::from_secs(20), move || async move {
            h.call_with(gate, json!({}), 5_000).await.is_ok()
        })
    };
    let opened = tokio::select! {
        answered = &mut run => panic!("the run answered with its gate shut: {answered:?}"),
        opened = opened => opened,
    };
    assert!(opened, "the gate never opened; log:\n{}", h.log());
    let answer = run.await.expect("the run answers");
    assert_eq!(
        answer["stdout"], "before the gate\nafter the gate\n",
        "{answer}"
    );
    assert_eq!(answer["output"]["frames"], 3, "{answer}");

    // The end: the last frame and the verdict, to the same ref.
    let last = h
        .call(WATCH, json!({"output": writer, "after": after}))
        .await
        .expect("an ended run's output stays a while");
    assert_eq!(last["ended"], true, "{last}");
    assert_eq!(text(&last, "stdout"), "after the gate\n", "{last}");
    assert_eq!(last["next"], 2, "{last}");
    let end = &last["end"];
    assert_eq!(
        (
            &end["type"],
            &end["seq"],
            &end["success"],
            &end["exit_code"]
        ),
        (&json!("end"), &json!(3), &json!(true), &json!(0)),
        "{last}"
    );

    // Nobody else: a wrong key and an unknown channel read alike.
    let mut wrong_key = writer.clone();
    wrong_key["access_key"] = json!("not-the-key");
    let mut unknown = writer.clone();
    unknown["channel_id"] = json!("no-such-channel");
    let a = refused(h.call(WATCH, json!({"output": wrong_key})).await);
    let b = refused(h.call(WATCH, json!({"output": unknown})).await);
    assert_eq!(a, b, "no oracle: a wrong key reads as an unknown channel");
    assert!(a.message.contains("`output`"), "{a:?}");
    let mut reader = writer.clone();
    reader["direction"] = json!("read");
    let c = refused(h.call(WATCH, json!({"output": reader})).await);
    assert!(c.message.contains("`output.direction`"), "{c:?}");
    let log = h.log();
    let key = writer["access_key"].as_str().unwrap();
    assert!(!log.contains(key), "the access key reached the log");
    drop(channel);
    h.finish(0).await;
}
