//! The concurrency probe: how many calls of one published function run at
//! once. Eight calls of a handler that sleeps 1.5 s go out together; each
//! answers when it ran, and the most that overlapped is the slot count. In
//! a namespace of the probe's own, torn down again.

use serde_json::{json, Value};

use super::{Answer, Prober};

const CALLS: usize = 8;

/// The most of `spans` (start, end) that overlap at one instant.
fn most_at_once(spans: &[(f64, f64)]) -> usize {
    spans
        .iter()
        .map(|(at, _)| spans.iter().filter(|(s, e)| s <= at && at < e).count())
        .max()
        .unwrap_or(0)
}

pub(super) async fn concurrency(p: &mut Prober<'_>) {
    let ns = format!("cf-draft-{:08x}-par", rand::random::<u32>());
    let id = format!("{ns}::span");
    let source = "import time\n\ndef handler(payload):\n    start = time.time()\n    time.sleep(1.5)\n    return {'start': start, 'end': time.time()}\n";
    let registered = p
        .target(
            "register_function",
            json!({"function_id": id, "lang": "python", "source": source}),
        )
        .await;
    if matches!(registered, Answer::Ok(_)) {
        let calls = (0..CALLS).map(|i| p.call(&id, json!({"i": i})));
        let spans: Vec<(f64, f64)> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .filter_map(|a| match a {
                Answer::Ok(v) => Some((
                    v.get("start").and_then(Value::as_f64)?,
                    v.get("end").and_then(Value::as_f64)?,
                )),
                _ => None,
            })
            .collect();
        if spans.len() == CALLS {
            let n = most_at_once(&spans);
            p.note(
                "handler_concurrency",
                n,
                format!("{CALLS} calls of a 1.5 s handler at once: at most {n} overlapped"),
            );
            if n > 1 {
                p.note(
                    "self_call_stalls",
                    "false",
                    "calls of one runtime overlap, so a self-call has a slot to run in",
                );
            }
        }
    }
    let _ = p.target("teardown", json!({"namespace": ns})).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_that_overlap_is_counted() {
        let spans = [(0.0, 1.5), (0.1, 1.6), (0.2, 1.7), (1.6, 3.1), (1.7, 3.2)];
        assert_eq!(most_at_once(&spans), 3);
        assert_eq!(most_at_once(&[(0.0, 1.0), (1.0, 2.0)]), 1);
    }
}
