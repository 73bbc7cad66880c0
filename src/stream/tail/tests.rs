//! The tails `watch` reads: order, `after`, bounds, the end, the registry's
//! keys and eviction, and the `Sink` that feeds them.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rstest::rstest;
use serde_json::json;

use super::*;
use crate::bus::{BusError, FrameWriter};
use crate::stream::Sink;

fn writer_ref(channel: &str, key: &str) -> ChannelRef {
    ChannelRef {
        channel_id: channel.into(),
        access_key: key.into(),
        direction: "write".into(),
    }
}

fn seqs(w: &Watched) -> Vec<u64> {
    w.frames.iter().map(|f| f.seq).collect()
}

/// A tail holding frames 0..5, stdout and stderr interleaved.
fn five() -> Tail {
    let t = Tail::default();
    for (seq, stream, data) in [
        (0, Stream::Stdout, "a\n"),
        (1, Stream::Stderr, "b\n"),
        (2, Stream::Stdout, "c\n"),
        (3, Stream::Stdout, "d"),
        (4, Stream::Stderr, "e\n"),
    ] {
        t.push(seq, stream, data);
    }
    t
}

#[test]
fn a_watcher_reads_the_frames_in_order_with_their_streams() {
    let w = five().read(None);
    let got: Vec<(u64, &str, &str)> = w
        .frames
        .iter()
        .map(|f| (f.seq, f.stream.as_str(), f.data.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (0, "stdout", "a\n"),
            (1, "stderr", "b\n"),
            (2, "stdout", "c\n"),
            (3, "stdout", "d"),
            (4, "stderr", "e\n"),
        ]
    );
    assert_eq!((w.next, w.skipped, w.ended), (Some(4), 0, false));
    assert_eq!(
        serde_json::to_value(&w.frames[1]).unwrap(),
        json!({"seq": 1, "type": "stderr", "data": "b\n"}),
        "a frame reads as the channel's data frame"
    );
}

#[rstest]
#[case::from_the_oldest(None, &[0, 1, 2, 3, 4], Some(4))]
#[case::after_the_first(Some(0), &[1, 2, 3, 4], Some(4))]
#[case::after_some(Some(2), &[3, 4], Some(4))]
#[case::nothing_new(Some(4), &[], Some(4))]
#[case::past_the_end(Some(99), &[], Some(99))]
fn after_answers_only_the_frames_past_it(
    #[case] after: Option<u64>,
    #[case] want: &[u64],
    #[case] next: Option<u64>,
) {
    let w = five().read(after);
    assert_eq!(seqs(&w), want);
    assert_eq!(w.next, next);
    assert_eq!(w.skipped, 0);
}

#[test]
fn an_empty_tail_answers_nothing_and_no_next() {
    let w = Tail::default().read(None);
    assert_eq!(
        (w.frames.len(), w.next, w.skipped, w.ended),
        (0, None, 0, false)
    );
}

/// docs/contract.md: a tail keeps the last 64 KiB of text and at most 256
/// frames; the newest frame is always there.
#[rstest]
#[case::many_small_frames(300, 10, 256)]
#[case::few_big_frames(5, 16 * 1024, 4)]
#[case::text_bound_first(10, 10_000, 6)]
#[case::within_both(100, 100, 100)]
#[case::one_frame_over_the_text_bound(1, 100_000, 1)]
fn a_tail_keeps_the_newest_frames_within_its_bounds(
    #[case] count: u64,
    #[case] size: usize,
    #[case] held: u64,
) {
    let t = Tail::default();
    let text = "x".repeat(size);
    for seq in 0..count {
        t.push(seq, Stream::Stdout, &text);
    }
    let w = t.read(None);
    let want: Vec<u64> = (count - held..count).collect();
    assert_eq!(seqs(&w), want);
    assert_eq!(w.skipped, count - held, "the frames it lost are counted");
    let after = t.read(Some(1));
    assert_eq!(
        after.skipped,
        (count - held).saturating_sub(2),
        "frames 2.. are wanted after 1"
    );
}

#[test]
fn the_end_frame_comes_once_the_stream_ended() {
    let t = five();
    let end = json!({"seq": 5, "type": "end", "dropped": 0, "exit_code": 0, "success": true});
    t.end(&end);
    let w = t.read(Some(4));
    assert!(w.ended);
    assert_eq!(w.end.as_ref(), Some(&end));
    assert_eq!(seqs(&w), Vec::<u64>::new());
    let all = t.read(None);
    assert_eq!(
        (seqs(&all).len(), all.ended),
        (5, true),
        "the frames stay readable after the end"
    );
}

#[test]
fn a_run_gone_without_its_end_frame_ends_its_tail_without_one() {
    let t = five();
    t.close_at(Instant::now());
    let w = t.read(None);
    assert_eq!((w.ended, w.end), (true, None));
}

#[rstest]
#[case::the_holder("c1", "k-right", true)]
#[case::another_key("c1", "k-wrong", false)]
#[case::a_longer_key("c1", "k-right-and-more", false)]
#[case::an_empty_key("c1", "", false)]
#[case::another_channel("c2", "k-right", false)]
fn only_the_writer_refs_key_reaches_a_tail(
    #[case] channel: &str,
    #[case] key: &str,
    #[case] reaches: bool,
) {
    let tails = Tails::default();
    let tail = tails.open(&writer_ref("c1", "k-right")).unwrap();
    tail.push(0, Stream::Stdout, "secret output\n");
    let got = tails.read(&writer_ref(channel, key), None);
    assert_eq!(got.is_some(), reaches);
    if let Some(w) = got {
        assert_eq!(w.frames[0].data, "secret output\n");
    }
}

/// docs/contract.md: an ended run's output stays for about 10 s, a
/// running one's as long as it runs.
#[rstest]
#[case::just_ended(Duration::ZERO, true)]
#[case::nearly_ten_seconds(Duration::from_millis(9_900), true)]
#[case::ten_seconds(Duration::from_secs(10), false)]
#[case::long_after(Duration::from_secs(3_600), false)]
fn an_ended_tail_is_evicted_after_ten_seconds(#[case] later: Duration, #[case] reaches: bool) {
    let tails = Tails::default();
    let t0 = Instant::now();
    let r = writer_ref("c1", "k");
    let tail = tails.open_at(&r, t0).unwrap();
    tail.end_at(&json!({"seq": 0, "type": "end"}), t0);
    assert_eq!(tails.read_at(&r, None, t0 + later).is_some(), reaches);
}

#[test]
fn a_running_tail_is_never_evicted_for_its_age() {
    let tails = Tails::default();
    let t0 = Instant::now();
    let r = writer_ref("c1", "k");
    tails.open_at(&r, t0).unwrap();
    let hour = t0 + Duration::from_secs(3_600);
    assert!(tails.read_at(&r, None, hour).is_some());
}

#[test]
fn past_64_ended_tails_the_oldest_ended_go_first() {
    let tails = Tails::default();
    let t0 = Instant::now();
    let live = writer_ref("live", "k");
    tails.open_at(&live, t0).unwrap();
    // 70 runs end 1 ms apart, in an order unlike their channel names.
    for i in 0..70u64 {
        let r = writer_ref(&format!("c{}", (i * 11) % 70), "k");
        let tail = tails.open_at(&r, t0).unwrap();
        tail.end_at(&json!({}), t0 + Duration::from_millis(i));
    }
    let now = t0 + Duration::from_millis(100);
    let kept: Vec<u64> = (0..70u64)
        .filter(|i| {
            let r = writer_ref(&format!("c{}", (i * 11) % 70), "k");
            tails.read_at(&r, None, now).is_some()
        })
        .collect();
    assert_eq!(
        kept,
        (6..70).collect::<Vec<_>>(),
        "the 6 that ended first went"
    );
    assert!(
        tails.read_at(&live, None, now).is_some(),
        "a running one stays"
    );
}

#[test]
fn past_256_running_tails_a_new_run_streams_unwatched() {
    let tails = Tails::default();
    let t0 = Instant::now();
    let mut opened = Vec::new();
    for i in 0..256 {
        opened.push(
            tails
                .open_at(&writer_ref(&format!("c{i}"), "k"), t0)
                .unwrap(),
        );
    }
    let extra = writer_ref("extra", "k");
    assert!(tails.open_at(&extra, t0).is_none());
    assert!(tails.read_at(&extra, None, t0).is_none());
    opened[0].close_at(t0);
    assert!(
        tails.open_at(&extra, t0).is_some(),
        "an ended run frees its place"
    );
}

#[test]
fn a_later_run_to_the_same_channel_takes_its_entry_over() {
    let tails = Tails::default();
    let r = writer_ref("c1", "k");
    tails.open(&r).unwrap().push(0, Stream::Stdout, "first\n");
    tails.open(&r).unwrap().push(0, Stream::Stdout, "second\n");
    let w = tails.read(&r, None).unwrap();
    assert_eq!(w.frames[0].data, "second\n");
}

/// A writer whose every send stalls: every frame is dropped for the
/// channel's reader.
struct Stalled(AtomicUsize);

impl FrameWriter for Stalled {
    fn send(
        &self,
        _text: String,
    ) -> Pin<Box<dyn Future<Output = Result<(), BusError>> + Send + '_>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::pending())
    }
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// The sink feeds its tail every data frame it makes, the ones its reader
/// lost included, then the end frame; dropped, it ends the tail.
#[tokio::test]
async fn a_sink_feeds_its_tail_every_frame_and_the_end() {
    let tails = Tails::default();
    let r = writer_ref("c1", "k");
    let sink = Sink::start(
        Box::new(Stalled(AtomicUsize::new(0))),
        Duration::from_secs(1),
    )
    .watched(tails.open(&r).unwrap());
    sink.push(Stream::Stdout, b"one\n");
    sink.push(Stream::Stderr, b"two\n");
    sink.push(Stream::Stdout, b"three");
    let mid = tails.read(&r, None).unwrap();
    assert_eq!(
        mid.frames
            .iter()
            .map(|f| (f.stream.as_str(), f.data.as_str()))
            .collect::<Vec<_>>(),
        [
            ("stdout", "one\n"),
            ("stderr", "two\n"),
            ("stdout", "three")
        ]
    );
    assert!(!mid.ended);
    // The stalled reader takes nothing: the queue fills and frames drop,
    // and the tail still has the newest.
    for i in 3..400 {
        sink.push(Stream::Stdout, format!("l{i}\n").as_bytes());
    }
    let summary = sink.end(json!({"exit_code": 0, "success": true}));
    assert!(summary.dropped > 0, "{summary:?}");
    let done = tails.read(&r, Some(398)).unwrap();
    assert_eq!(seqs(&done), [399]);
    assert_eq!(done.frames[0].data, "l399\n");
    assert!(done.ended);
    let end = done.end.expect("the end frame");
    assert_eq!(
        (&end["type"], &end["seq"], &end["success"]),
        (&json!("end"), &json!(400), &json!(true))
    );
    assert_eq!(end["dropped"], json!(summary.dropped));

    let r2 = writer_ref("c2", "k");
    let gone = Sink::start(
        Box::new(Stalled(AtomicUsize::new(0))),
        Duration::from_secs(1),
    )
    .watched(tails.open(&r2).unwrap());
    gone.push(Stream::Stdout, b"partial\n");
    drop(gone);
    let w = tails.read(&r2, None).unwrap();
    assert_eq!((w.ended, w.end, w.frames.len()), (true, None, 1));
}
