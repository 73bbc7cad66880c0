//! What a streamed run's caller reads: its stdout and stderr as frames, in
//! the order the worker saw them, each with a sequence number, then one end
//! frame with the run's verdict (docs/contract.md, "Streaming output").
//!
//! Raw bytes come in chunks that may split a line or a UTF-8 character; the
//! worker's own lines (the result frame, a relay's or a turn's verdict:
//! lines that start with `\x1eSCR`) are never the caller's, so a line that
//! starts so is held until it is whole and then dropped.

use serde_json::{json, Value};

/// Which of the code's streams a chunk is (`stdout` or `stderr` on the
/// wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

/// The start of every line the worker's wrappers and relays write for
/// themselves (`guest.rs`'s result frame, the verdict markers).
const WORKER_LINE: &[u8] = b"\x1eSCR";
/// A run's result frame, with the newline its wrapper writes before it.
const RESULT_LEAD: &[u8] = b"\n\x1eSCR1 ";

/// Turns chunks of the two streams into frames' text.
#[derive(Debug, Default)]
pub struct Framer {
    /// Bytes of each stream not sent yet: an unfinished UTF-8 character,
    /// or an unfinished line that may be the worker's.
    held: [Vec<u8>; 2],
    /// Bytes of each stream seen so far (the follower's offsets).
    seen: [u64; 2],
}

impl Framer {
    /// Bytes of `stream` taken in so far.
    pub fn seen(&self, stream: Stream) -> u64 {
        self.seen[stream.index()]
    }

    /// The text of `chunk` (the next bytes of `stream`) the caller may see
    /// now; `None` when nothing is ready.
    pub fn push(&mut self, stream: Stream, chunk: &[u8]) -> Option<String> {
        let i = stream.index();
        self.seen[i] += chunk.len() as u64;
        let held = &mut self.held[i];
        held.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut rest: &[u8] = held;
        while !rest.is_empty() {
            if starts_like_worker(rest) {
                // Held until the line is whole: then dropped if it is the
                // worker's, sent if it only began like one.
                let lead = usize::from(rest[0] == b'\n');
                let Some(end) = rest[lead..].iter().position(|b| *b == b'\n') else {
                    break;
                };
                let line = &rest[..=lead + end];
                if line.starts_with(RESULT_LEAD) {
                    // The result frame and the newline its wrapper puts
                    // before it (`run_result::take` takes both).
                } else if line[lead..].starts_with(WORKER_LINE) {
                    out.extend_from_slice(&line[..lead]);
                } else {
                    out.extend_from_slice(line);
                }
                rest = &rest[line.len()..];
                continue;
            }
            let upto = next_marker(rest).unwrap_or(rest.len());
            let complete = complete_utf8(&rest[..upto]);
            out.extend_from_slice(&rest[..complete]);
            rest = &rest[complete..];
            if complete < upto {
                break;
            }
        }
        let consumed = held.len() - rest.len();
        held.drain(..consumed);
        (!out.is_empty()).then(|| text_of(out))
    }

    /// What is still held of `stream` once it has ended (an unfinished
    /// line or character is the caller's after all, unless it is the
    /// worker's).
    pub fn finish(&mut self, stream: Stream) -> Option<String> {
        let held = std::mem::take(&mut self.held[stream.index()]);
        if held.is_empty() || held.starts_with(WORKER_LINE) || held.starts_with(RESULT_LEAD) {
            return None;
        }
        Some(text_of(held))
    }
}

/// `bytes` as text, an invalid byte as U+FFFD (without a copy when there
/// is none).
fn text_of(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Whether `b` starts with `\x1eSCR` or `\n\x1eSCR`, or a prefix of
/// either that more bytes may complete (a lone `\n` is held until the next
/// byte says which).
fn starts_like_worker(b: &[u8]) -> bool {
    let like = |marker: &[u8]| {
        let n = b.len().min(marker.len());
        n > 0 && b[..n] == marker[..n]
    };
    like(WORKER_LINE) || like(b"\n\x1eSCR")
}

/// Where the next `\n\x1e` begins, after the first byte.
fn next_marker(b: &[u8]) -> Option<usize> {
    memchr::memmem::find(b.get(1..)?, b"\n\x1e").map(|at| at + 1)
}

/// How much of `b` is whole UTF-8 characters (an invalid byte counts as
/// whole: it stays invalid whatever follows).
fn complete_utf8(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => b.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => b.len(),
    }
}

/// A data frame: `{"seq", "type": "stdout"|"stderr", "data"}`.
pub fn data_frame(seq: u64, stream: Stream, data: &str) -> Value {
    json!({"seq": seq, "type": stream.as_str(), "data": data})
}

/// The end frame: `{"seq", "type": "end", …}` with the answer's verdict
/// (`exit_code`, `success`, `duration_ms`) or the error's `code` and
/// `message`, and how many frames were dropped.
pub fn end_frame(seq: u64, verdict: Value, dropped: u64) -> Value {
    let mut frame = json!({"seq": seq, "type": "end", "dropped": dropped});
    if let (Some(f), Value::Object(v)) = (frame.as_object_mut(), verdict) {
        f.extend(v);
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: &mut Framer, s: Stream, chunks: &[&[u8]]) -> String {
        let mut text: String = chunks.iter().filter_map(|c| f.push(s, c)).collect();
        text.extend(f.finish(s));
        text
    }

    #[rstest::rstest]
    #[case::plain(&["hello\n", "world\n"], "hello\nworld\n")]
    #[case::split_line(&["hel", "lo\n"], "hello\n")]
    #[case::result_frame_dropped(&["a\n\n\u{1e}SCR1 0123 ok 1\nb\n"], "a\nb\n")]
    #[case::result_frame_split(&["a\n", "\n\u{1e}SC", "R1 0123 ok 1\n", "b"], "a\nb")]
    #[case::result_frame_without_lead(&["\u{1e}SCR1 0123 ok 1\n"], "")]
    #[case::verdict_dropped(&["\u{1e}SCR-RELAY k ran 0\n"], "")]
    #[case::verdict_after_a_line(&["e\n\u{1e}SCR-RELAY k ran 0\n"], "e\n")]
    #[case::blank_lines_kept(&["\n", "\n", "x"], "\n\nx")]
    #[case::record_separator_kept(&["\u{1e}SCX\n"], "\u{1e}SCX\n")]
    #[case::unfinished_kept(&["no newline"], "no newline")]
    #[case::unfinished_marker_prefix_kept(&["\u{1e}S"], "\u{1e}S")]
    fn the_caller_sees_the_codes_bytes_and_never_the_workers_lines(
        #[case] chunks: &[&str],
        #[case] expected: &str,
    ) {
        let mut f = Framer::default();
        let bytes: Vec<&[u8]> = chunks.iter().map(|c| c.as_bytes()).collect();
        assert_eq!(all(&mut f, Stream::Stdout, &bytes), expected);
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        assert_eq!(f.seen(Stream::Stdout), total as u64);
    }

    #[test]
    fn a_character_split_over_chunks_arrives_whole() {
        let e = "é\n".as_bytes();
        let mut f = Framer::default();
        assert_eq!(f.push(Stream::Stdout, &e[..1]), None);
        assert_eq!(f.push(Stream::Stdout, &e[1..]).as_deref(), Some("é\n"));
    }

    #[test]
    fn a_partial_line_is_sent_at_once_unless_it_may_be_the_workers() {
        let mut f = Framer::default();
        assert_eq!(f.push(Stream::Stderr, b"50%").as_deref(), Some("50%"));
        assert_eq!(f.push(Stream::Stderr, b"\n\x1e"), None);
        assert_eq!(
            f.push(Stream::Stderr, b"SCR1 x\n100%\n"),
            Some("100%\n".into())
        );
    }

    #[test]
    fn the_end_frame_carries_the_verdict() {
        let end = end_frame(7, json!({"exit_code": 0, "success": true}), 2);
        assert_eq!(
            end,
            json!({"seq": 7, "type": "end", "dropped": 2, "exit_code": 0, "success": true})
        );
    }
}
