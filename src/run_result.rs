//! A run's completion value (`result`): the frame the run wrapper writes as
//! the last line of stdout, taken off before the caller sees stdout, and the
//! cap that replaces an oversized value whole by seed 001's omission marker.

use serde_json::Value;

use crate::guest;

/// What the run wrapper reported about the code's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Completion {
    /// The value, as JSON (null: none, or JSON cannot represent it).
    Value(Value),
    /// Too large to send: its size in bytes and its shape.
    Omitted {
        bytes: u64,
        shape: Option<(&'static str, u64)>,
    },
}

/// `stdout` without the frame carrying `secret`, and what the frame said
/// (`None` when there is none: the run failed or was cut). Only the
/// wrapper's own frame line is removed, with the newline it put before it,
/// so the code's own output comes back exactly as written.
pub(crate) fn take(stdout: &str, secret: &str) -> (String, Option<Completion>) {
    let frame = guest::last_frame(stdout, secret)
        .filter(|f| f.at > 0 && stdout.as_bytes()[f.at - 1] == b'\n');
    let Some(f) = frame else {
        return (stdout.to_string(), None);
    };
    let kept = format!("{}{}", &stdout[..f.at - 1], &stdout[f.end..]);
    let completion = serde_json::from_str::<Value>(f.body)
        .ok()
        .and_then(|v| match f.kind {
            "result" => Some(Completion::Value(v)),
            "result_omitted" => Some(Completion::Omitted {
                bytes: v.get("bytes").and_then(Value::as_u64).unwrap_or(0),
                shape: ["array", "object", "string"]
                    .into_iter()
                    .find_map(|k| v.get(k).and_then(Value::as_u64).map(|n| (k, n))),
            }),
            _ => None,
        });
    (kept, completion)
}

/// The `result` a caller gets: the value, or seed 001's marker in its place
/// when its JSON is over `max_bytes` (0: no cap).
pub(crate) fn capped(c: Completion, max_bytes: usize) -> Value {
    let (bytes, shape) = match c {
        Completion::Value(v) => {
            let bytes = serde_json::to_string(&v).map_or(0, |s| s.len());
            if max_bytes == 0 || bytes <= max_bytes {
                return v;
            }
            (bytes as u64, shape_of(&v))
        }
        Completion::Omitted { bytes, shape } => (bytes, shape),
    };
    Value::String(marker(bytes, shape))
}

fn shape_of(v: &Value) -> Option<(&'static str, u64)> {
    match v {
        Value::Array(a) => Some(("array", a.len() as u64)),
        Value::Object(o) => Some(("object", o.len() as u64)),
        Value::String(s) => Some(("string", s.chars().count() as u64)),
        _ => None,
    }
}

/// Seed 001's omission marker.
fn marker(bytes: u64, shape: Option<(&'static str, u64)>) -> String {
    let what = match shape {
        Some(("array", n)) => format!("{n} array elements"),
        Some(("object", n)) => format!("{n} object keys"),
        Some((_, n)) => format!("a {n}-char string"),
        None => "a value".to_string(),
    };
    format!(
        "<omitted: result was ~{} KB ({what}); returning it whole would flood the model context — print a slice, aggregate in code, or write it to iii.files and return a summary>",
        (bytes as f64 / 1024.0).round() as u64
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::after_a_newline("hi\n", "hi\n")]
    #[case::without_one("hi", "hi")]
    #[case::nothing_printed("", "")]
    fn the_frame_leaves_the_codes_output_exactly_as_written(
        #[case] printed: &str,
        #[case] kept: &str,
    ) {
        let stdout = format!("{printed}\n\u{1e}SCR1 s3cret result 4\n");
        assert_eq!(
            take(&stdout, "s3cret"),
            (kept.to_string(), Some(Completion::Value(json!(4))))
        );
    }

    #[test]
    fn a_frame_with_another_secret_is_the_codes_own_output() {
        let stdout = "\n\u{1e}SCR1 forged result 666\n";
        assert_eq!(take(stdout, "real"), (stdout.to_string(), None));
    }

    #[test]
    fn an_oversized_value_is_replaced_whole_by_the_marker() {
        let v: Vec<u32> = (0..100_000).collect();
        let m = capped(Completion::Value(json!(v)), 32_768);
        let m = m.as_str().unwrap();
        assert!(
            m.starts_with("<omitted: result was ~575 KB (100000 array elements); "),
            "{m}"
        );
        assert_eq!(
            capped(Completion::Value(json!([1, 2])), 32_768),
            json!([1, 2])
        );
        assert_eq!(
            capped(Completion::Value(json!(v)), 0)
                .as_array()
                .unwrap()
                .len(),
            100_000
        );
        let told = Completion::Omitted {
            bytes: 2_000_000,
            shape: Some(("string", 1_999_998)),
        };
        assert!(capped(told, 32_768)
            .as_str()
            .unwrap()
            .starts_with("<omitted: result was ~1953 KB (a 1999998-char string)"));
    }
}
