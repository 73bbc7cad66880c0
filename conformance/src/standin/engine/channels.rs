//! Data channels: `engine::channels::create` and the `/ws/channels/{id}`
//! sockets that carry one channel's frames from its writer to its reader.
//!
//! As on the engine (`docs/engine.md`, "Data channels"): a channel is a
//! bounded queue of `buffer_size` frames (64 by default, at most 1024, at
//! least 1) with one writer end and one reader end, each taken by the first
//! socket that connects in its direction; a later one is closed at once.
//! Text and binary frames pass in order; the reader is closed once the writer
//! has gone and the queue is drained, so a writer may finish before the
//! reader connects. An unknown id or a wrong key is refused with 404 before
//! the upgrade, a malformed query with 400 and the engine's wording. The
//! sockets need no authentication on any listener: the access key is the
//! capability. Channels one of whose ends never connected are swept 5
//! minutes after creation (checked every minute); used ones stay listed.
//! Stopping the stand-in closes every channel socket.

use std::time::Instant;

use serde::Deserialize;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::handshake::server::ErrorResponse;
use tokio_tungstenite::tungstenite::http::{header, StatusCode};
use tokio_tungstenite::WebSocketStream;

use super::*;

/// A channel's depth when `buffer_size` is not given.
const DEFAULT_BUFFER: usize = 64;
/// The engine's cap on `buffer_size`.
const MAX_BUFFER: usize = 1024;
/// How long a channel may wait for its second end.
pub(super) const CHANNEL_TTL: Duration = Duration::from_secs(5 * 60);
/// How often stale channels are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Where channel sockets are served (one more path segment: the id).
const ROUTE: &str = "/ws/channels";

/// The engine's open channels, by id.
pub(super) struct Channels {
    open: HashMap<String, Channel>,
    /// Turns true when the engine stops: every channel socket then ends.
    stopped: watch::Sender<bool>,
}

impl Default for Channels {
    fn default() -> Self {
        Channels {
            open: HashMap::new(),
            stopped: watch::channel(false).0,
        }
    }
}

struct Channel {
    key: String,
    tx: Option<mpsc::Sender<WsMessage>>,
    rx: Option<mpsc::Receiver<WsMessage>>,
    created: Instant,
}

/// The builtin's input, named as on the engine (its name shows in
/// deserialization errors).
#[derive(Deserialize)]
struct CreateChannelInput {
    #[serde(default)]
    buffer_size: Option<usize>,
}

impl Channels {
    /// `engine::channels::create`: a new channel and its two refs, keys
    /// sorted as the engine sends them.
    pub(super) fn create(&mut self, data: &Value) -> Result<Value, (&'static str, String)> {
        let input = CreateChannelInput::deserialize(data).map_err(|e| {
            (
                "deserialization_error",
                format!("Failed to deserialize input for engine::channels::create: {e}"),
            )
        })?;
        let depth = input
            .buffer_size
            .unwrap_or(DEFAULT_BUFFER)
            .clamp(1, MAX_BUFFER);
        let id = Uuid::new_v4().to_string();
        let key = Uuid::new_v4().to_string();
        let (tx, rx) = mpsc::channel(depth);
        let end =
            |direction: &str| json!({"access_key": key, "channel_id": id, "direction": direction});
        let answer = json!({"reader": end("read"), "writer": end("write")});
        self.open.insert(
            id.clone(),
            Channel {
                key: key.clone(),
                tx: Some(tx),
                rx: Some(rx),
                created: Instant::now(),
            },
        );
        Ok(answer)
    }

    fn find(&mut self, id: &str, key: &str) -> Option<&mut Channel> {
        self.open.get_mut(id).filter(|c| c.key == key)
    }

    /// Drops the channels older than [`CHANNEL_TTL`] with an end nobody
    /// took; dropping an untaken end closes the other one's socket.
    pub(super) fn sweep(&mut self, now: Instant) -> usize {
        let before = self.open.len();
        self.open.retain(|_, c| {
            now.duration_since(c.created) <= CHANNEL_TTL || (c.tx.is_none() && c.rx.is_none())
        });
        before - self.open.len()
    }

    /// Drops every channel and ends every channel socket.
    pub(super) fn close_all(&mut self) {
        self.stopped.send_replace(true);
        self.open.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.len()
    }
}

/// Which end a socket asked for (`dir=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Read,
    Write,
}

/// A channel socket that passed the handshake checks.
#[derive(Debug)]
pub(super) struct ChannelSocket {
    id: String,
    key: String,
    dir: Direction,
}

/// The handshake check of a request for `path`: `None` when the path is not
/// a channel route, else the admitted socket or the HTTP refusal.
pub(super) fn admit(
    state: &Shared,
    path: &str,
    query: Option<&str>,
) -> Option<Result<ChannelSocket, ErrorResponse>> {
    let rest = path.strip_prefix(ROUTE)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    let id = rest.strip_prefix('/').unwrap_or_default();
    if id.is_empty() || id.contains('/') {
        // The route holds exactly one segment; anything else has no route.
        return Some(Err(refusal(StatusCode::NOT_FOUND, "")));
    }
    Some(check(state, id, query))
}

#[allow(clippy::result_large_err)] // the refusal is tungstenite's handshake type
fn check(state: &Shared, id: &str, query: Option<&str>) -> Result<ChannelSocket, ErrorResponse> {
    let (key, dir) = parse_query(query.unwrap_or_default()).map_err(|e| {
        refusal(
            StatusCode::BAD_REQUEST,
            &format!("Failed to deserialize query string: {e}"),
        )
    })?;
    if lock(state).channels.find(id, &key).is_none() {
        return Err(refusal(StatusCode::NOT_FOUND, "Channel not found"));
    }
    Ok(ChannelSocket {
        id: id.to_string(),
        key,
        dir,
    })
}

/// `key` and `dir` from the query, worded as the engine's query extractor
/// words its failures; other parameters (an SDK keeps the engine URL's own
/// before them) are ignored.
pub(super) fn parse_query(query: &str) -> Result<(String, Direction), String> {
    let (mut key, mut dir) = (None, None);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "key" if key.is_some() => return Err("duplicate field `key`".into()),
            "key" => key = Some(value.into_owned()),
            "dir" if dir.is_some() => return Err("duplicate field `dir`".into()),
            "dir" => {
                dir = Some(match value.as_ref() {
                    "read" => Direction::Read,
                    "write" => Direction::Write,
                    other => {
                        return Err(format!(
                            "dir: unknown variant `{other}`, expected `read` or `write`"
                        ))
                    }
                })
            }
            _ => {}
        }
    }
    let key = key.ok_or("missing field `key`")?;
    let dir = dir.ok_or("missing field `dir`")?;
    Ok((key, dir))
}

/// An HTTP refusal; a body comes as `text/plain`, as the engine's does.
fn refusal(status: StatusCode, body: &str) -> ErrorResponse {
    let mut resp = ErrorResponse::new((!body.is_empty()).then(|| body.to_string()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if !body.is_empty() {
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    headers.insert(
        header::CONTENT_LENGTH,
        header::HeaderValue::from(body.len()),
    );
    resp
}

/// `fut`, unless the engine stops first (`None`).
async fn unless_stopped<T>(
    stopped: &mut watch::Receiver<bool>,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        _ = stopped.wait_for(|s| *s) => None,
        out = fut => Some(out),
    }
}

/// Serves one upgraded channel socket until its end is done.
pub(super) async fn serve(
    mut ws: WebSocketStream<TcpStream>,
    state: Shared,
    socket: ChannelSocket,
) {
    let (end, mut stopped) = {
        let mut st = lock(&state);
        let stopped = st.channels.stopped.subscribe();
        let channel = st.channels.find(&socket.id, &socket.key);
        let end = match socket.dir {
            Direction::Read => channel.and_then(|c| c.rx.take()).map(End::Read),
            Direction::Write => channel.and_then(|c| c.tx.take()).map(End::Write),
        };
        (end, stopped)
    };
    match end {
        Some(End::Read(mut rx)) => {
            while let Some(Some(frame)) = unless_stopped(&mut stopped, rx.recv()).await {
                if ws.send(frame).await.is_err() {
                    break;
                }
            }
            // Drained after the writer went (or the engine stopped).
            let _ = ws.send(WsMessage::Close(None)).await;
        }
        Some(End::Write(tx)) => {
            while let Some(Some(frame)) = unless_stopped(&mut stopped, ws.next()).await {
                let frame = match frame {
                    Ok(f @ (WsMessage::Text(_) | WsMessage::Binary(_))) => f,
                    Ok(WsMessage::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                // Waits while the queue is full; fails once the reader left.
                match unless_stopped(&mut stopped, tx.send(frame)).await {
                    Some(Ok(())) => {}
                    Some(Err(_)) | None => break,
                }
            }
            // Dropping the sender is what closes the reader.
            drop(tx);
            let _ = ws.close(None).await;
        }
        // The end was taken already (or swept since the handshake).
        None => {
            let _ = ws.send(WsMessage::Close(None)).await;
        }
    }
}

/// The end of a channel a socket took.
enum End {
    Read(mpsc::Receiver<WsMessage>),
    Write(mpsc::Sender<WsMessage>),
}

/// Sweeps stale channels every minute until stopped.
pub(super) fn sweeper(state: Shared) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                _ = tokio::time::sleep(SWEEP_EVERY) => {
                    let swept = lock(&state).channels.sweep(Instant::now());
                    if swept > 0 {
                        tracing::debug!(swept, "swept stale data channels");
                    }
                }
            }
        }
    });
    (stop_tx, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_answers_two_refs_of_one_channel_sorted_like_the_engine() {
        let mut c = Channels::default();
        let v = c.create(&json!({"buffer_size": null})).expect("created");
        assert_eq!(
            serde_json::to_string(&v).unwrap().find("\"reader\""),
            Some(1)
        );
        assert_eq!(v["reader"]["direction"], "read");
        assert_eq!(v["writer"]["direction"], "write");
        assert_eq!(v["reader"]["channel_id"], v["writer"]["channel_id"]);
        assert_eq!(v["reader"]["access_key"], v["writer"]["access_key"]);
        assert_eq!(c.len(), 1);
    }

    #[rstest::rstest]
    #[case(json!(null), "invalid type: null, expected struct CreateChannelInput")]
    #[case(json!({"buffer_size": "x"}), "invalid type: string \"x\", expected usize")]
    #[case(json!({"buffer_size": -1}), "invalid value: integer `-1`, expected usize")]
    fn bad_input_is_a_deserialization_error(#[case] data: Value, #[case] why: &str) {
        let e = Channels::default().create(&data).expect_err("refused");
        assert_eq!(e.0, "deserialization_error");
        assert_eq!(
            e.1,
            format!("Failed to deserialize input for engine::channels::create: {why}")
        );
    }

    #[rstest::rstest]
    #[case(0, 1)]
    #[case(5, 5)]
    #[case(5000, MAX_BUFFER)]
    fn depth_is_clamped(#[case] asked: usize, #[case] depth: usize) {
        let mut c = Channels::default();
        c.create(&json!({ "buffer_size": asked })).expect("created");
        let ch = c.open.values().next().expect("one channel");
        assert_eq!(ch.tx.as_ref().map(|t| t.max_capacity()), Some(depth));
    }

    #[rstest::rstest]
    #[case("key=k&dir=read", Ok(("k".to_string(), Direction::Read)))]
    #[case("token=a&key=k%2F&dir=write", Ok(("k/".to_string(), Direction::Write)))]
    #[case("key=k", Err("missing field `dir`".to_string()))]
    #[case("dir=read", Err("missing field `key`".to_string()))]
    #[case("", Err("missing field `key`".to_string()))]
    #[case("key=a&key=b&dir=read", Err("duplicate field `key`".to_string()))]
    #[case("key=a&dir=READ", Err("dir: unknown variant `READ`, expected `read` or `write`".to_string()))]
    fn query_is_read_as_the_engine_reads_it(
        #[case] q: &str,
        #[case] want: Result<(String, Direction), String>,
    ) {
        assert_eq!(parse_query(q), want);
    }

    #[test]
    fn the_sweep_drops_only_old_channels_with_an_untaken_end() {
        let mut c = Channels::default();
        for _ in 0..3 {
            c.create(&json!({})).expect("created");
        }
        let ids: Vec<String> = c.open.keys().cloned().collect();
        // One fully connected, one half connected, one untouched.
        let used = c.open.get_mut(&ids[0]).unwrap();
        let _ = (used.tx.take(), used.rx.take());
        c.open.get_mut(&ids[1]).unwrap().rx.take();
        let later = Instant::now() + CHANNEL_TTL + Duration::from_secs(1);
        assert_eq!(c.sweep(Instant::now()), 0, "nothing is stale yet");
        assert_eq!(c.sweep(later), 2);
        assert!(c.open.contains_key(&ids[0]), "a used channel stays");
    }
}
