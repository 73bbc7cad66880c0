//! Data channels on the stand-in engine, through the SDK's `create_channel`,
//! `ChannelWriter` and `ChannelReader` and through raw sockets: the
//! `engine::channels::create` answer frame, a round trip of ~1 MB under
//! backpressure, a writer that finishes before its reader connects, text and
//! binary frames in order, each end taken once, 404 for a wrong key or id and
//! 400 for a malformed query, and channels on the RBAC guest listener (made
//! there, read through the main one). With `III_BIN` naming a real engine
//! binary, the same checks run against it, started with the same two
//! listeners.

mod common;

use std::time::Duration;

use code_runner_conformance::standin::engine::{EngineOptions, GuestListener, StandInEngine};
use common::client;
use futures_util::{SinkExt, StreamExt};
use iii_sdk::channel::{ChannelReader, ChannelWriter, StreamChannelRef};
use iii_sdk::helpers::create_channel;
use iii_sdk::IIIClient;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long any one step may take before the check fails instead of hanging.
const STEP: Duration = Duration::from_secs(20);

/// `fut`, or a failure naming `what` once [`STEP`] has passed.
async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {STEP:?}"))
}

/// Pseudo-random bytes (a fixed xorshift), so a shifted or dropped frame
/// shows.
fn payload(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn channel_url(base: &str, r: &StreamChannelRef, key: &str, dir: &str) -> String {
    format!("{base}/ws/channels/{}?key={key}&dir={dir}", r.channel_id)
}

/// A raw socket on the engine that has read its greeting.
async fn raw_worker(url: &str) -> Ws {
    let (mut ws, _) = within("connect", tokio_tungstenite::connect_async(url))
        .await
        .expect("connects");
    let hello = within("greeting", ws.next()).await.expect("greeting");
    assert!(hello
        .expect("frame")
        .to_text()
        .unwrap()
        .contains("workerregistered"));
    ws
}

/// The raw text of the answer to one `engine::channels::create` with `data`,
/// uuids replaced by `U`.
async fn create_frame(ws: &mut Ws, data: &str) -> String {
    let frame = format!(
        r#"{{"type":"invokefunction","invocation_id":"7a1f0c52-3a0b-4a55-9b38-1c7b8f1e2d90","function_id":"engine::channels::create","data":{data}}}"#
    );
    ws.send(Message::Text(frame.into())).await.expect("sent");
    let uuid = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .expect("a regex");
    loop {
        let m = within("create answer", ws.next())
            .await
            .expect("open")
            .expect("frame");
        let text = m.to_text().unwrap_or_default().to_string();
        if text.contains("invocationresult") {
            return uuid.replace_all(&text, "U").into_owned();
        }
    }
}

/// The HTTP status (and body) a channel socket request is refused with.
async fn refused(url: &str) -> (u16, String) {
    match within("refusal", tokio_tungstenite::connect_async(url)).await {
        Err(WsError::Http(resp)) => (
            resp.status().as_u16(),
            String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned(),
        ),
        Err(e) => panic!("{url}: expected an HTTP refusal, got {e}"),
        Ok(_) => panic!("{url}: expected an HTTP refusal, got an upgrade"),
    }
}

/// The next frame of a raw channel socket (`None` once it is over).
async fn next_frame(ws: &mut Ws) -> Option<Message> {
    match within("channel frame", ws.next()).await {
        Some(Ok(m)) => Some(m),
        _ => None,
    }
}

async fn answer_frames(main: &str) {
    let mut ws = raw_worker(main).await;
    let head = r#"{"type":"invocationresult","invocation_id":"U","function_id":"engine::channels::create","#;
    let refs = r#""result":{"reader":{"access_key":"U","channel_id":"U","direction":"read"},"writer":{"access_key":"U","channel_id":"U","direction":"write"}}}"#;
    for data in [
        r#"{}"#,
        r#"{"buffer_size":null}"#,
        r#"{"buffer_size":0}"#,
        r#"{"buffer_size":5000}"#,
        "[]",
    ] {
        assert_eq!(
            create_frame(&mut ws, data).await,
            format!("{head}{refs}"),
            "{data}"
        );
    }
    let refusal = |why: &str| {
        format!(
            r#"{head}"error":{{"code":"deserialization_error","message":"Failed to deserialize input for engine::channels::create: {why}"}}}}"#
        )
    };
    assert_eq!(
        create_frame(&mut ws, r#"{"buffer_size":"x"}"#).await,
        refusal(r#"invalid type: string \"x\", expected usize"#)
    );
    assert_eq!(
        create_frame(&mut ws, "null").await,
        refusal("invalid type: null, expected struct CreateChannelInput")
    );
    let _ = ws.close(None).await;
}

/// ~1 MB through a channel two frames deep: the writer waits on the reader.
async fn round_trip(caller: &IIIClient) {
    let data = payload(1_000_003);
    let ch = within("create", create_channel(caller, Some(2)))
        .await
        .expect("channel created");
    assert_eq!(ch.writer_ref.channel_id, ch.reader_ref.channel_id);
    assert_eq!(ch.writer_ref.access_key, ch.reader_ref.access_key);
    uuid::Uuid::parse_str(&ch.reader_ref.channel_id).expect("a uuid id");
    uuid::Uuid::parse_str(&ch.reader_ref.access_key).expect("a uuid key");
    let writer = ch.writer;
    let sent = data.clone();
    let writing = tokio::spawn(async move {
        writer.write(&sent).await?;
        writer.close().await
    });
    let got = within("read_all", ch.reader.read_all())
        .await
        .expect("read");
    within("writer", writing)
        .await
        .expect("join")
        .expect("written");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the bytes come back unchanged and in order");
}

/// The writer writes everything and closes before the reader connects.
async fn writer_first(caller: &IIIClient) {
    let data = payload(1 << 20);
    let ch = within("create", create_channel(caller, None))
        .await
        .expect("channel created");
    within("write", ch.writer.write(&data))
        .await
        .expect("written");
    within("close", ch.writer.close()).await.expect("closed");
    let got = within("read_all", ch.reader.read_all())
        .await
        .expect("read");
    assert!(got == data, "buffered frames wait for the reader");
}

/// Raw sockets: text and binary frames in order, each end taken once, the
/// reader closed once the writer has gone.
async fn ends_taken_once(caller: &IIIClient, base: &str) {
    let ch = within("create", create_channel(caller, None))
        .await
        .expect("channel created");
    let key = ch.reader_ref.access_key.clone();
    let (mut w, _) = within(
        "writer",
        tokio_tungstenite::connect_async(channel_url(base, &ch.writer_ref, &key, "write")),
    )
    .await
    .expect("the writer connects");
    w.send(Message::Text("first".into())).await.expect("sent");
    let (mut r, _) = within(
        "reader",
        tokio_tungstenite::connect_async(channel_url(base, &ch.reader_ref, &key, "read")),
    )
    .await
    .expect("the reader connects");
    assert_eq!(
        next_frame(&mut r).await,
        Some(Message::Text("first".into()))
    );

    // The reader's end is taken: a second one is upgraded, then closed.
    let second = ChannelReader::new(base, &ch.reader_ref);
    let nothing = within("second reader", second.read_all()).await;
    assert_eq!(nothing.expect("closed, not refused"), Vec::<u8>::new());
    // So is the writer's.
    let (mut w2, _) = within(
        "second writer",
        tokio_tungstenite::connect_async(channel_url(base, &ch.writer_ref, &key, "write")),
    )
    .await
    .expect("a second writer is upgraded");
    assert!(matches!(
        next_frame(&mut w2).await,
        Some(Message::Close(_)) | None
    ));

    w.send(Message::Binary(vec![1u8, 2, 3].into()))
        .await
        .expect("sent");
    w.close(None).await.expect("the writer closes");
    assert_eq!(
        next_frame(&mut r).await,
        Some(Message::Binary(vec![1u8, 2, 3].into()))
    );
    assert!(
        matches!(next_frame(&mut r).await, Some(Message::Close(_)) | None),
        "the reader is closed once the writer has gone"
    );
}

/// 404 before the upgrade for a wrong key or an unknown id, 400 for a
/// malformed query, and a query of the engine URL's own kept ahead of `key`.
async fn refusals(caller: &IIIClient, base: &str) {
    let ch = within("create", create_channel(caller, None))
        .await
        .expect("channel created");
    let key = ch.reader_ref.access_key.clone();
    let not_found = (404, "Channel not found".to_string());
    assert_eq!(
        refused(&channel_url(base, &ch.reader_ref, "wrong", "read")).await,
        not_found
    );
    assert_eq!(
        refused(&channel_url(base, &ch.writer_ref, "wrong", "write")).await,
        not_found
    );
    let unknown = StreamChannelRef {
        channel_id: uuid::Uuid::new_v4().to_string(),
        ..ch.reader_ref.clone()
    };
    assert_eq!(
        refused(&channel_url(base, &unknown, &key, "read")).await,
        not_found
    );
    let bad_query = |q: &str| format!("{base}/ws/channels/{}?{q}", ch.reader_ref.channel_id);
    assert_eq!(
        refused(&bad_query(&format!("key={key}"))).await,
        (
            400,
            "Failed to deserialize query string: missing field `dir`".into()
        )
    );
    assert_eq!(
        refused(&bad_query(&format!("key={key}&dir=sideways"))).await,
        (
            400,
            "Failed to deserialize query string: dir: unknown variant `sideways`, expected `read` or `write`"
                .into()
        )
    );
    assert_eq!(refused(&format!("{base}/ws/channels")).await.0, 404);

    // Through the SDK: the wrong key fails to connect.
    let wrong = StreamChannelRef {
        access_key: "wrong".into(),
        ..ch.reader_ref.clone()
    };
    let err = within("wrong key", ChannelReader::new(base, &wrong).read_all())
        .await
        .expect_err("a wrong key is refused");
    assert!(err.to_string().contains("404"), "{err}");

    // The right key still works, with the SDK's URL carrying a query of the
    // engine URL's own before `key=`.
    let with_query = format!("{base}/?token=abc");
    let writer = ChannelWriter::new(&with_query, &ch.writer_ref);
    within("write", writer.write(b"after refusals"))
        .await
        .expect("written");
    within("close", writer.close()).await.expect("closed");
    let got = within(
        "read",
        ChannelReader::new(&with_query, &ch.reader_ref).read_all(),
    )
    .await
    .expect("read");
    assert_eq!(got, b"after refusals");
}

/// A channel made through the RBAC listener (`engine::channels::create` is in
/// its carve-out), written there and read through the main one.
async fn across_listeners(main: &str, guest: &str) {
    let guest_caller = client(guest, "channels-guest").await;
    let ch = within(
        "create on the guest listener",
        create_channel(&guest_caller, None),
    )
    .await
    .expect("the carve-out lets a guest create channels");
    within("write", ch.writer.write(b"through the guest listener"))
        .await
        .expect("written on the guest listener");
    within("close", ch.writer.close()).await.expect("closed");
    let got = within("read", ChannelReader::new(main, &ch.reader_ref).read_all())
        .await
        .expect("read through the main listener");
    assert_eq!(got, b"through the guest listener");
    guest_caller.shutdown_async().await;
}

async fn channel_checks(main: &str, guest: &str) {
    answer_frames(main).await;
    let caller = client(main, "channels-caller").await;
    round_trip(&caller).await;
    writer_first(&caller).await;
    ends_taken_once(&caller, main).await;
    refusals(&caller, main).await;
    across_listeners(main, guest).await;
    caller.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_channels_on_the_stand_in() {
    let engine = StandInEngine::start_with(EngineOptions {
        guest: Some(GuestListener::default()),
        ..EngineOptions::default()
    })
    .await
    .expect("engine starts");
    let guest = engine.guest_url().expect("a guest listener");
    channel_checks(&engine.url(), &guest).await;
    engine.shutdown().await;
}

/// The stand-in's own contract: stopping it closes every socket, a
/// channel's reader waiting on an idle writer included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_stand_in_closes_its_channel_sockets() {
    let engine = StandInEngine::start(0).await.expect("engine starts");
    let base = engine.url();
    let caller = client(&base, "channels-stop").await;
    let ch = within("create", create_channel(&caller, None))
        .await
        .expect("channel created");
    let key = ch.reader_ref.access_key.clone();
    let (mut w, _) = within(
        "writer",
        tokio_tungstenite::connect_async(channel_url(&base, &ch.writer_ref, &key, "write")),
    )
    .await
    .expect("the writer connects");
    w.send(Message::Text("ready".into())).await.expect("sent");
    let (mut r, _) = within(
        "reader",
        tokio_tungstenite::connect_async(channel_url(&base, &ch.reader_ref, &key, "read")),
    )
    .await
    .expect("the reader connects");
    assert_eq!(
        next_frame(&mut r).await,
        Some(Message::Text("ready".into()))
    );
    caller.shutdown_async().await;
    engine.shutdown().await;
    assert!(matches!(
        next_frame(&mut r).await,
        Some(Message::Close(_)) | None
    ));
    assert!(matches!(
        next_frame(&mut w).await,
        Some(Message::Close(_)) | None
    ));
}

/// The real engine's config: a main listener and an RBAC listener that
/// authenticates nobody and exposes nothing, like the stand-in's default
/// guest listener.
fn real_config(main: u16, guest: u16) -> String {
    format!(
        "workers:\n  - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {main}\n\
         \x20 - name: iii-worker-manager\n    config:\n      host: 127.0.0.1\n      port: {guest}\n\
         \x20     rbac:\n        expose_functions: []\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_channels_on_a_real_engine() {
    let Some(engine) = common::real_engine::RealEngine::start(
        "data_channels_on_a_real_engine",
        "the data-channel checks",
        real_config,
    )
    .await
    else {
        return;
    };
    channel_checks(&engine.main_url(), &engine.guest_url()).await;
    engine.stop().await;
}
