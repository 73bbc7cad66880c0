//! A loopback stand-in of the iii engine.
//!
//! It speaks the worker protocol exactly as the real engine was observed to
//! (`docs/engine.md` and the recorded transcripts): the same
//! frames, field order, error codes and messages, so that a worker that works
//! here works on a real engine. It knows nothing about sandboxes; the daemon
//! double connects to it like any other worker.
//!
//! A second, RBAC-gated listener (the guest listener) is modelled in
//! [`rbac`]: authentication by a function, call gating, prefixes and the
//! registration hook. The main listener authenticates nothing.
//!
//! Deliberately absent: middleware, trigger(-type) registration hooks,
//! queues (`enqueue` answers
//! `enqueue_error` exactly as an engine without a queue worker does), streaming
//! channels, observe/local-dispatch (the recorded engine advertised no
//! protocol features), a built-in configuration worker (the hermetic bench
//! attaches a double instead), the `iii-observability` worker (its functions,
//! `log`/`trace` trigger types and config watch), and the firing of the
//! engine's own `engine::functions-available` / `engine::workers-available`
//! trigger types (bindings to them are accepted and listed, never fired).
//!
//! `conformance/tests/transcript_replay.rs` replays the recorded frames against
//! this module and compares what comes back, key order included.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use uuid::Uuid;

mod rbac;
use rbac::{AuthResult, Session};
pub use rbac::{FunctionFilter, GuestListener, RbacConfig, CARVE_OUT};

/// How long an engine-originated call (auth, registration hook) may take.
const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the real engine holds a worker's registrations back while it waits
/// for the worker to name itself through `engine::workers::register`.
pub const NAME_GRACE: Duration = Duration::from_secs(5);

/// The namespace an invocation without `namespace` resolves in.
const DEFAULT_NAMESPACE: &str = "default";

/// Upper bound of a batched `engine::functions::info`.
const INFO_BATCH_MAX: usize = 32;

/// The engine release this module stands in for (`fixtures/transcripts`
/// were recorded on it); its in-process workers report it as their version.
pub const ENGINE_VERSION: &str = "0.23.0-rc.4";

/// Trigger types the engine itself declares (its `iii-engine-functions`
/// worker). Bindings to them are live at once; `engine::triggers::list` hides
/// them unless `include_internal`. The stand-in never fires them.
const BUILTIN_TRIGGER_TYPES: &[(&str, &str)] = &[
    (
        "engine::functions-available",
        "Triggered when functions are registered/unregistered",
    ),
    (
        "engine::workers-available",
        "Triggered when workers connect/disconnect",
    ),
];

/// Every `engine::*` function of the real engine's `iii-engine-functions`
/// worker, for its `function_count` in `engine::workers::list`. The stand-in
/// answers the ones a worker touches (see [`builtin`]); the others answer
/// `function_not_found`.
const ENGINE_FUNCTIONS: &[&str] = &[
    "engine::channels::create",
    "engine::functions::info",
    "engine::functions::list",
    "engine::register_trigger",
    "engine::registered-triggers::info",
    "engine::registered-triggers::list",
    "engine::triggers::info",
    "engine::triggers::list",
    "engine::unregister_trigger",
    "engine::workers::info",
    "engine::workers::list",
    "engine::workers::register",
];

/// The engine's in-process workers as `engine::workers::list` shows them:
/// `(id and name, description, function count)`. The real engine also lists
/// `configuration` and `iii-observability`, which the stand-in does not have.
const IN_PROCESS_WORKERS: &[(&str, &str, usize)] = &[
    (
        "iii-engine-functions",
        "Core engine introspection (engine::*) and platform authoring reference.",
        ENGINE_FUNCTIONS.len(),
    ),
    (
        "iii-telemetry",
        "Anonymous usage telemetry and heartbeat reporting for the engine.",
        0,
    ),
    (
        "iii-worker-manager",
        "WebSocket listener that SDK workers connect to. Supports RBAC, middleware, registration hooks, and channels.",
        0,
    ),
];

/// A running stand-in engine bound to loopback.
pub struct StandInEngine {
    addr: SocketAddr,
    guest_addr: Option<SocketAddr>,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
    state: Shared,
}

/// Where the stand-in listens.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The main (trusted) listener's host; loopback only.
    pub host: Ipv4Addr,
    /// The main listener's port (0 picks a free one).
    pub port: u16,
    /// A second, RBAC-gated listener, as an extra `iii-worker-manager`
    /// entry with an `rbac` block opens on the real engine.
    pub guest: Option<GuestListener>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            host: Ipv4Addr::LOCALHOST,
            port: 0,
            guest: None,
        }
    }
}

impl StandInEngine {
    /// Binds 127.0.0.1:`port` (0 picks a free port) and starts serving.
    /// Only loopback is ever bound: the engine has no authentication.
    pub async fn start(port: u16) -> std::io::Result<StandInEngine> {
        StandInEngine::start_with(EngineOptions {
            port,
            ..EngineOptions::default()
        })
        .await
    }

    /// Starts the main listener and, when asked, an RBAC guest listener.
    pub async fn start_with(options: EngineOptions) -> std::io::Result<StandInEngine> {
        if !options.host.is_loopback()
            || options
                .guest
                .as_ref()
                .is_some_and(|g| !g.host.is_loopback())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the stand-in engine binds loopback addresses only",
            ));
        }
        let state: Shared = Arc::new(Mutex::new(State::new()));
        let listener = TcpListener::bind((options.host, options.port)).await?;
        let addr = listener.local_addr()?;
        let mut stops = Vec::new();
        let mut tasks = Vec::new();
        let (stop, task) = accept_loop(listener, state.clone(), None);
        stops.push(stop);
        tasks.push(task);
        let mut guest_addr = None;
        if let Some(g) = options.guest {
            let listener = TcpListener::bind((g.host, g.port)).await?;
            guest_addr = Some(listener.local_addr()?);
            let (stop, task) = accept_loop(listener, state.clone(), Some(Arc::new(g.rbac)));
            stops.push(stop);
            tasks.push(task);
        }
        tracing::info!(%addr, guest = ?guest_addr, "stand-in engine listening");
        Ok(StandInEngine {
            addr,
            guest_addr,
            stops,
            tasks,
            state,
        })
    }

    /// The guest listener's `ws://HOST:PORT`, when one was opened.
    pub fn guest_url(&self) -> Option<String> {
        self.guest_addr.map(|a| format!("ws://{a}"))
    }

    /// The `ws://127.0.0.1:PORT` URL workers connect to.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ids of the functions currently visible in `namespace`, sorted.
    /// For tests that wait on registration or unregistration.
    pub fn function_ids(&self, namespace: &str) -> Vec<String> {
        let st = lock(&self.state);
        let mut ids: Vec<String> = st
            .functions
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, id)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Everything SDKs sent on `/otel` so far (lossy UTF-8), oldest first.
    pub fn telemetry(&self) -> Vec<String> {
        lock(&self.state).telemetry.iter().cloned().collect()
    }

    /// Names of the live, named workers. For tests and leak checks.
    pub fn worker_names(&self) -> Vec<String> {
        let st = lock(&self.state);
        let mut names: Vec<String> = st.workers.values().filter_map(|w| w.name.clone()).collect();
        names.sort();
        names
    }

    /// Declares trigger type `id` on behalf of a worker the bench does not run
    /// (a console, an agent harness), the way the engine's own types are
    /// declared: bindings to it become live, so they are listed by
    /// `engine::registered-triggers::list` and `engine::functions::info` as on
    /// an engine where that worker is connected. Nothing ever fires it. A
    /// binding to a type nobody declared stays pending and unlisted, as on the
    /// real engine.
    pub fn declare_trigger_type(&self, id: &str, description: &str) {
        lock(&self.state).trigger_types.insert(
            id.to_string(),
            TriggerType {
                owner: None,
                description: description.to_string(),
            },
        );
    }

    /// Stops accepting and closes every socket.
    pub async fn shutdown(mut self) {
        self.close().await;
    }

    async fn close(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let st = lock(&self.state);
        for w in st.workers.values() {
            let _ = w.tx.send(Outbound::Close);
        }
    }
}

impl Drop for StandInEngine {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        let st = lock(&self.state);
        for w in st.workers.values() {
            let _ = w.tx.send(Outbound::Close);
        }
    }
}

type Shared = Arc<Mutex<State>>;

/// Accepts connections on `listener` until stopped; `rbac` gates them.
fn accept_loop(
    listener: TcpListener,
    state: Shared,
    rbac: Option<Arc<RbacConfig>>,
) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                accepted = listener.accept() => {
                    if let Ok((stream, peer)) = accepted {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve_socket(stream, peer, state.clone(), rbac.clone()));
                    }
                }
            }
        }
    });
    (stop_tx, task)
}

fn lock(state: &Shared) -> MutexGuard<'_, State> {
    // A panic while holding the lock is a bug in this module; keep serving
    // the other sockets rather than cascading it.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a connection's writer task sends.
enum Outbound {
    Frame(String),
    Close,
}

struct State {
    workers: HashMap<Uuid, Worker>,
    /// Visible functions, keyed by (namespace, function id).
    functions: BTreeMap<(String, String), Function>,
    /// Synchronous invocations awaiting their result, keyed by invocation id.
    pending: HashMap<String, PendingCall>,
    trigger_types: BTreeMap<String, TriggerType>,
    /// Trigger bindings by id, whether or not their type is known yet. Only
    /// those whose type is declared are live (listed, bound); the others wait
    /// for their type, unlisted, as the engine's pending bindings do.
    triggers: BTreeMap<String, Binding>,
    /// When the engine started: the `connected_at_ms` of its in-process workers.
    started_at_ms: u128,
    /// What SDKs sent on `/otel`, kept (bounded) so tests can check that no
    /// secret reaches telemetry.
    telemetry: std::collections::VecDeque<String>,
    telemetry_bytes: usize,
    /// Calls the engine itself made (auth, hooks), by invocation id.
    engine_calls: HashMap<String, EngineCall>,
}

/// Where the answer of an engine-originated call goes.
type EngineCall = oneshot::Sender<Result<Value, (String, String)>>;

/// Bound of the kept telemetry, oldest dropped first.
const TELEMETRY_KEEP_BYTES: usize = 64 << 20;

impl State {
    fn new() -> State {
        let trigger_types = BUILTIN_TRIGGER_TYPES
            .iter()
            .map(|(id, description)| {
                (
                    id.to_string(),
                    TriggerType {
                        owner: None,
                        description: description.to_string(),
                    },
                )
            })
            .collect();
        State {
            workers: HashMap::new(),
            functions: BTreeMap::new(),
            pending: HashMap::new(),
            trigger_types,
            triggers: BTreeMap::new(),
            started_at_ms: now_ms(),
            telemetry: std::collections::VecDeque::new(),
            telemetry_bytes: 0,
            engine_calls: HashMap::new(),
        }
    }

    /// Whether `b`'s trigger type is declared, i.e. the binding is live.
    fn is_live(&self, b: &Binding) -> bool {
        self.trigger_types.contains_key(&b.trigger_type)
    }
}

struct Worker {
    tx: mpsc::UnboundedSender<Outbound>,
    name: Option<String>,
    namespace: String,
    named: bool,
    /// Registrations held back until the worker names itself (or the grace ends).
    held: Vec<Function>,
    metadata: Value,
    connected_at_ms: u128,
    /// Set on an RBAC listener: what this connection may call and register.
    session: Option<Arc<Session>>,
}

#[derive(Clone)]
struct Function {
    id: String,
    owner: Uuid,
    description: Option<String>,
    request_format: Option<Value>,
    response_format: Option<Value>,
    metadata: Option<Value>,
}

struct PendingCall {
    caller: Uuid,
    callee: Uuid,
    function_id: String,
}

struct TriggerType {
    /// The worker that declared it; `None` for the engine's own types.
    owner: Option<Uuid>,
    description: String,
}

#[derive(Clone)]
struct Binding {
    id: String,
    trigger_type: String,
    function_id: String,
    config: Value,
    owner: Uuid,
}

// ---- outbound frames, in the field order the real engine writes them ----

#[derive(Serialize)]
struct WorkerRegisteredFrame<'a> {
    r#type: &'static str,
    worker_id: &'a str,
    reattach_token: &'a str,
}

#[derive(Serialize)]
struct ResultFrame<'a> {
    r#type: &'static str,
    invocation_id: &'a str,
    function_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody<'a>>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
}

/// A callee's `invocationresult` as relayed to the caller. The engine decodes
/// the callee's frame and writes a fresh one, so the caller sees the engine's
/// field order (`type`, `invocation_id`, `function_id`, then `result` or
/// `error`), whatever order the callee's SDK used; the values themselves,
/// a handler's error body included, pass through unchanged.
#[derive(Serialize)]
struct RelayedResultFrame<'a> {
    r#type: &'static str,
    invocation_id: &'a str,
    function_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baggage: Option<&'a Value>,
}

#[derive(Serialize)]
struct ForwardFrame<'a> {
    r#type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    invocation_id: Option<&'a str>,
    function_id: &'a str,
    data: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baggage: Option<&'a Value>,
}

#[derive(Serialize)]
struct BindFrame<'a> {
    r#type: &'static str,
    id: &'a str,
    trigger_type: &'a str,
    function_id: &'a str,
    config: &'a Value,
}

#[derive(Serialize)]
struct UnbindFrame<'a> {
    r#type: &'static str,
    id: &'a str,
    trigger_type: &'a str,
}

fn encode<T: Serialize>(frame: &T) -> String {
    serde_json::to_string(frame).expect("engine frames always serialize")
}

fn error_frame(invocation_id: &str, function_id: &str, code: &str, message: &str) -> String {
    encode(&ResultFrame {
        r#type: "invocationresult",
        invocation_id,
        function_id,
        result: None,
        error: Some(ErrorBody { code, message }),
    })
}

fn result_frame(invocation_id: &str, function_id: &str, result: &Value) -> String {
    encode(&ResultFrame {
        r#type: "invocationresult",
        invocation_id,
        function_id,
        result: Some(result),
        error: None,
    })
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

// ---- sockets ----

#[allow(clippy::result_large_err)] // the handshake callback's signature is tungstenite's
async fn serve_socket(
    stream: TcpStream,
    peer: SocketAddr,
    state: Shared,
    rbac: Option<Arc<RbacConfig>>,
) {
    let mut path = String::from("/");
    let mut query: Option<String> = None;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let ws = tokio_tungstenite::accept_hdr_async(stream, |req: &Request, resp: Response| {
        path = req.uri().path().to_string();
        query = req.uri().query().map(str::to_string);
        for (k, v) in req.headers() {
            if let Ok(v) = v.to_str() {
                headers.insert(k.as_str().to_string(), v.to_string());
            }
        }
        Ok(resp)
    })
    .await;
    let Ok(mut ws) = ws else { return };
    if path.starts_with("/ws/channels") {
        drain(ws).await;
        return;
    }
    // An RBAC listener authenticates every worker and `/otel` connection
    // once, after the upgrade; a refusal is one error frame, then a close.
    let session = match rbac {
        None => None,
        Some(config) => {
            let auth = match &config.auth_function_id {
                None => Ok(AuthResult::open()),
                Some(fid) => {
                    let input = rbac::auth_input(&headers, query.as_deref(), peer);
                    match engine_call(&state, fid, input).await {
                        Ok(Value::Null) => Err("auth function returned no result".to_string()),
                        Ok(v) => serde_json::from_value::<AuthResult>(v).map_err(|e| e.to_string()),
                        Err((_code, message)) => Err(message),
                    }
                }
            };
            match auth {
                Ok(auth) => Some(Arc::new(Session { config, auth })),
                Err(message) => {
                    let frame = rbac::auth_error_frame(&message);
                    let _ = ws.send(WsMessage::Text(frame.into())).await;
                    let _ = ws.close(None).await;
                    return;
                }
            }
        }
    };
    if path.starts_with("/otel") {
        // SDKs open `/otel` by default. Nothing here analyses telemetry; it
        // is kept, bounded, for tests that look for leaked secrets in it.
        keep_telemetry(ws, state).await;
        return;
    }
    serve_worker(ws, state, session).await;
}

/// Calls `function_id` as the engine itself (no caller worker), and waits
/// for its answer: `Err((code, message))` when it is missing, fails, or
/// times out.
async fn engine_call(
    state: &Shared,
    function_id: &str,
    data: Value,
) -> Result<Value, (String, String)> {
    let invocation_id = Uuid::new_v4().to_string();
    let (tx, rx) = oneshot::channel();
    {
        let mut st = lock(state);
        let Some(callee) = st
            .functions
            .get(&(DEFAULT_NAMESPACE.to_string(), function_id.to_string()))
            .map(|f| f.owner)
        else {
            return Err((
                "function_not_found".into(),
                format!("Function {function_id} not found in namespace {DEFAULT_NAMESPACE}."),
            ));
        };
        let local = st
            .workers
            .get(&callee)
            .and_then(|w| w.session.as_ref())
            .map(|s| s.local_id(function_id).to_string())
            .unwrap_or_else(|| function_id.to_string());
        st.engine_calls.insert(invocation_id.clone(), tx);
        let frame = encode(&ForwardFrame {
            r#type: "invokefunction",
            invocation_id: Some(&invocation_id),
            function_id: &local,
            data: &data,
            metadata: None,
            traceparent: None,
            baggage: None,
        });
        send(&st, callee, frame);
    }
    match tokio::time::timeout(ENGINE_CALL_TIMEOUT, rx).await {
        Ok(Ok(answer)) => answer,
        _ => {
            lock(state).engine_calls.remove(&invocation_id);
            Err(("timeout".into(), format!("{function_id} did not answer")))
        }
    }
}

async fn keep_telemetry(ws: tokio_tungstenite::WebSocketStream<TcpStream>, state: Shared) {
    let (_sink, mut source) = ws.split();
    while let Some(Ok(frame)) = source.next().await {
        let text = match frame {
            WsMessage::Text(t) => t.to_string(),
            WsMessage::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => continue,
        };
        let mut st = lock(&state);
        st.telemetry_bytes += text.len();
        st.telemetry.push_back(text);
        while st.telemetry_bytes > TELEMETRY_KEEP_BYTES {
            match st.telemetry.pop_front() {
                Some(old) => st.telemetry_bytes -= old.len(),
                None => break,
            }
        }
    }
}

async fn drain(ws: tokio_tungstenite::WebSocketStream<TcpStream>) {
    let (_sink, mut source) = ws.split();
    while let Some(Ok(_)) = source.next().await {}
}

async fn serve_worker(
    ws: tokio_tungstenite::WebSocketStream<TcpStream>,
    state: Shared,
    session: Option<Arc<Session>>,
) {
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Outbound>();
    let worker_id = Uuid::new_v4();
    let reattach = Uuid::new_v4();
    let greeting = encode(&WorkerRegisteredFrame {
        r#type: "workerregistered",
        worker_id: &worker_id.to_string(),
        reattach_token: &reattach.to_string(),
    });
    let _ = tx.send(Outbound::Frame(greeting));
    lock(&state).workers.insert(
        worker_id,
        Worker {
            tx: tx.clone(),
            name: None,
            namespace: DEFAULT_NAMESPACE.to_string(),
            named: false,
            held: Vec::new(),
            metadata: Value::Null,
            connected_at_ms: now_ms(),
            session: session.clone(),
        },
    );

    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            match out {
                Outbound::Frame(text) => {
                    if sink.send(WsMessage::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Outbound::Close => {
                    let _ = sink.close().await;
                    break;
                }
            }
        }
    });

    // The grace after which held registrations become visible even if the
    // worker never names itself.
    let grace_state = state.clone();
    let grace = tokio::spawn(async move {
        tokio::time::sleep(NAME_GRACE).await;
        let mut st = lock(&grace_state);
        flush_held(&mut st, worker_id);
    });

    while let Some(frame) = source.next().await {
        let text = match frame {
            Ok(WsMessage::Text(t)) => t.to_string(),
            Ok(WsMessage::Binary(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(WsMessage::Close(_)) | Err(_) => break,
            Ok(_) => continue, // pings are answered by tungstenite itself
        };
        let Ok(Value::Object(mut msg)) = serde_json::from_str::<Value>(&text) else {
            tracing::debug!("ignoring an undecodable frame");
            continue;
        };
        if let Some(session) = &session {
            // Registrations through an RBAC listener pass its gate first;
            // frames of one connection stay in order, as on the engine.
            if str_field(&msg, "type") == Some("registerfunction")
                && !admit_registration(&state, session, &mut msg).await
            {
                continue;
            }
        }
        handle_frame(&state, worker_id, msg);
    }

    grace.abort();
    disconnect(&state, worker_id);
    let _ = tx.send(Outbound::Close);
    let _ = writer.await;
}

/// Applies an RBAC session to one `registerfunction`: refused when the
/// session may not register, or the hook throws or answers no object; the
/// hook may map the id, description and metadata; the prefix comes last.
async fn admit_registration(
    state: &Shared,
    session: &Session,
    msg: &mut Map<String, Value>,
) -> bool {
    if !session.auth.allow_function_registration {
        return false;
    }
    let Some(id) = str_field(msg, "id").map(str::to_string) else {
        return false;
    };
    let mut id = id;
    if let Some(hook) = &session.config.on_function_registration_function_id {
        let input = json!({
            "function_id": id,
            "description": msg.get("description"),
            "metadata": msg.get("metadata"),
            "namespace": DEFAULT_NAMESPACE,
            "context": session.context(),
        });
        match engine_call(state, hook, input).await {
            Ok(Value::Object(mapped)) => {
                if let Some(s) = mapped.get("function_id").and_then(Value::as_str) {
                    id = s.to_string();
                }
                for key in ["description", "metadata"] {
                    if let Some(v) = mapped.get(key) {
                        msg.insert(key.into(), v.clone());
                    }
                }
            }
            other => {
                tracing::debug!(function_id = %id, answered = other.is_ok(), "registration denied by hook");
                return false;
            }
        }
    }
    msg.insert("id".into(), Value::String(session.registered_id(&id)));
    true
}

fn send(st: &State, to: Uuid, frame: String) {
    if let Some(w) = st.workers.get(&to) {
        let _ = w.tx.send(Outbound::Frame(frame));
    }
}

/// Sends a bind/unbind frame to the worker that declared `trigger_type`, if a
/// worker did (the engine's own types need no frame).
fn send_to_provider(st: &State, trigger_type: &str, frame: String) {
    if let Some(owner) = st.trigger_types.get(trigger_type).and_then(|t| t.owner) {
        send(st, owner, frame);
    }
}

fn str_field<'a>(msg: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    msg.get(key).and_then(Value::as_str)
}

fn handle_frame(state: &Shared, from: Uuid, msg: Map<String, Value>) {
    let Some(kind) = str_field(&msg, "type") else {
        return;
    };
    let mut st = lock(state);
    match kind {
        "registerfunction" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            let f = Function {
                id: id.to_string(),
                owner: from,
                description: str_field(&msg, "description").map(str::to_string),
                request_format: msg.get("request_format").cloned(),
                response_format: msg.get("response_format").cloned(),
                metadata: msg.get("metadata").cloned(),
            };
            let named = st.workers.get(&from).map(|w| w.named).unwrap_or(false);
            if named {
                publish(&mut st, f);
            } else if let Some(w) = st.workers.get_mut(&from) {
                w.held.retain(|h| h.id != f.id);
                w.held.push(f);
            }
        }
        "unregisterfunction" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            let prefixed = st
                .workers
                .get(&from)
                .and_then(|w| w.session.as_ref())
                .map(|s| s.registered_id(id));
            let id = prefixed.as_deref().unwrap_or(id);
            let ns = worker_namespace(&st, from);
            let key = (ns, id.to_string());
            if st.functions.get(&key).map(|f| f.owner) == Some(from) {
                st.functions.remove(&key);
            }
            if let Some(w) = st.workers.get_mut(&from) {
                w.held.retain(|h| h.id != id);
            }
        }
        "invokefunction" => invoke(&mut st, from, msg),
        "invocationresult" => {
            let Some(inv) = str_field(&msg, "invocation_id") else {
                return;
            };
            if let Some(waiter) = st.engine_calls.remove(inv) {
                let answer = match msg.get("error").filter(|e| !e.is_null()) {
                    Some(e) => Err((
                        e.get("code")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        e.get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    )),
                    None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = waiter.send(answer);
                return;
            }
            if let Some(p) = st.pending.get(inv) {
                if p.callee != from {
                    return;
                }
            }
            if let Some(p) = st.pending.remove(inv) {
                // Passed through unchanged, the handler's error body included,
                // in the engine's field order.
                let frame = encode(&RelayedResultFrame {
                    r#type: "invocationresult",
                    invocation_id: inv,
                    function_id: &p.function_id,
                    result: msg.get("result"),
                    error: msg.get("error"),
                    traceparent: msg.get("traceparent"),
                    baggage: msg.get("baggage"),
                });
                send(&st, p.caller, frame);
            }
        }
        "registertriggertype" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            st.trigger_types.insert(
                id.to_string(),
                TriggerType {
                    owner: Some(from),
                    description: str_field(&msg, "description").unwrap_or("").to_string(),
                },
            );
            // Bindings that waited for this type are handed to its provider now.
            let waiting: Vec<Binding> = st
                .triggers
                .values()
                .filter(|b| b.trigger_type == id)
                .cloned()
                .collect();
            for b in waiting {
                send(&st, from, bind_frame(&b));
            }
        }
        "unregistertriggertype" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            if st.trigger_types.get(id).and_then(|t| t.owner) == Some(from) {
                st.trigger_types.remove(id);
            }
        }
        "registertrigger" => register_trigger(&mut st, from, &msg),
        "unregistertrigger" => {
            let Some(id) = str_field(&msg, "id") else {
                return;
            };
            if let Some(b) = st.triggers.remove(id) {
                send_to_provider(&st, &b.trigger_type, unbind_frame(&b));
            }
        }
        "ping" => send(&st, from, r#"{"type":"pong"}"#.to_string()),
        // A reconnecting SDK retires its previous connection; that one is
        // already gone here (its socket closed), so there is nothing to do.
        "reattach" => {}
        _ => tracing::debug!(kind, "ignoring an unknown frame type"),
    }
}

fn bind_frame(b: &Binding) -> String {
    encode(&BindFrame {
        r#type: "registertrigger",
        id: &b.id,
        trigger_type: &b.trigger_type,
        function_id: &b.function_id,
        config: &b.config,
    })
}

fn unbind_frame(b: &Binding) -> String {
    encode(&UnbindFrame {
        r#type: "unregistertrigger",
        id: &b.id,
        trigger_type: &b.trigger_type,
    })
}

fn register_trigger(st: &mut State, from: Uuid, msg: &Map<String, Value>) {
    let (Some(id), Some(trigger_type), Some(function_id)) = (
        str_field(msg, "id"),
        str_field(msg, "trigger_type"),
        str_field(msg, "function_id"),
    ) else {
        return;
    };
    if let Some(ns) = msg.get("namespace").and_then(Value::as_str) {
        if ns.trim().is_empty() {
            let frame = json!({
                "type": "triggerregistrationresult",
                "id": id,
                "trigger_type": trigger_type,
                "function_id": function_id,
                "error": {
                    "code": "INVALID_NAMESPACE",
                    "message": "`namespace` is empty: it was named and left blank. Give it a name, or omit it to use `default`."
                }
            });
            send(st, from, ordered_trigger_result(frame));
            return;
        }
    }
    let b = Binding {
        id: id.to_string(),
        trigger_type: trigger_type.to_string(),
        function_id: function_id.to_string(),
        config: msg.get("config").cloned().unwrap_or_else(|| json!({})),
        owner: from,
    };
    send_to_provider(st, trigger_type, bind_frame(&b));
    // Unknown types leave the binding pending, silently, as the engine does.
    st.triggers.insert(b.id.clone(), b);
}

/// `triggerregistrationresult` in the engine's field order.
fn ordered_trigger_result(v: Value) -> String {
    #[derive(Serialize)]
    struct F<'a> {
        r#type: &'a str,
        id: &'a Value,
        trigger_type: &'a Value,
        function_id: &'a Value,
        error: &'a Value,
    }
    encode(&F {
        r#type: "triggerregistrationresult",
        id: &v["id"],
        trigger_type: &v["trigger_type"],
        function_id: &v["function_id"],
        error: &v["error"],
    })
}

fn worker_namespace(st: &State, id: Uuid) -> String {
    st.workers
        .get(&id)
        .map(|w| w.namespace.clone())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

/// Makes a function visible, unless another live worker owns its id.
fn publish(st: &mut State, f: Function) {
    let ns = worker_namespace(st, f.owner);
    let key = (ns.clone(), f.id.clone());
    if let Some(existing) = st.functions.get(&key) {
        if existing.owner != f.owner {
            let frame = json!({
                "type": "registrationrejected",
                "code": "FUNCTION_NAMESPACE_CONFLICT",
                "namespace": ns,
                "function_id": f.id,
                "owner_worker_id": existing.owner.to_string(),
            });
            send(st, f.owner, ordered_rejection(&frame));
            return;
        }
    }
    st.functions.insert(key, f);
}

/// `registrationrejected` in the engine's field order.
fn ordered_rejection(v: &Value) -> String {
    #[derive(Serialize)]
    struct F<'a> {
        r#type: &'a str,
        code: &'a Value,
        namespace: &'a Value,
        #[serde(skip_serializing_if = "Value::is_null")]
        worker_name: &'a Value,
        #[serde(skip_serializing_if = "Value::is_null")]
        function_id: &'a Value,
        owner_worker_id: &'a Value,
    }
    encode(&F {
        r#type: "registrationrejected",
        code: &v["code"],
        namespace: &v["namespace"],
        worker_name: &v["worker_name"],
        function_id: &v["function_id"],
        owner_worker_id: &v["owner_worker_id"],
    })
}

fn flush_held(st: &mut State, worker: Uuid) {
    let held = match st.workers.get_mut(&worker) {
        Some(w) => {
            w.named = true;
            std::mem::take(&mut w.held)
        }
        None => return,
    };
    for f in held {
        publish(st, f);
    }
}

fn disconnect(state: &Shared, gone: Uuid) {
    let mut st = lock(state);
    st.workers.remove(&gone);
    st.functions.retain(|_, f| f.owner != gone);
    // Calls the departed worker was serving end as `invocation_stopped`;
    // calls it was waiting on are dropped.
    let stopped: Vec<(String, PendingCall)> = st
        .pending
        .iter()
        .filter(|(_, p)| p.callee == gone || p.caller == gone)
        .map(|(k, p)| {
            (
                k.clone(),
                PendingCall {
                    caller: p.caller,
                    callee: p.callee,
                    function_id: p.function_id.clone(),
                },
            )
        })
        .collect();
    for (inv, p) in stopped {
        st.pending.remove(&inv);
        if p.callee == gone && p.caller != gone {
            let frame = error_frame(
                &inv,
                &p.function_id,
                "invocation_stopped",
                "Invocation stopped",
            );
            send(&st, p.caller, frame);
        }
    }
    let owned_types: Vec<String> = st
        .trigger_types
        .iter()
        .filter(|(_, t)| t.owner == Some(gone))
        .map(|(k, _)| k.clone())
        .collect();
    for t in owned_types {
        st.trigger_types.remove(&t);
    }
    let bindings: Vec<Binding> = st
        .triggers
        .values()
        .filter(|b| b.owner == gone)
        .cloned()
        .collect();
    for b in bindings {
        st.triggers.remove(&b.id);
        send_to_provider(&st, &b.trigger_type, unbind_frame(&b));
    }
}

// ---- invocation ----

fn invoke(st: &mut State, from: Uuid, msg: Map<String, Value>) {
    let Some(function_id) = str_field(&msg, "function_id").map(str::to_string) else {
        return;
    };
    let invocation_id = str_field(&msg, "invocation_id").map(str::to_string);
    let action = msg
        .get("action")
        .and_then(|a| a.get("type"))
        .and_then(Value::as_str);
    let data = msg.get("data").cloned().unwrap_or(Value::Null);
    let namespace = str_field(&msg, "namespace")
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_string();

    // An RBAC connection's calls, the engine's own functions included, pass
    // its decision first; a denial answers even a void call.
    if let Some(session) = st.workers.get(&from).and_then(|w| w.session.clone()) {
        let metadata = st
            .functions
            .get(&(namespace.clone(), function_id.clone()))
            .and_then(|f| f.metadata.clone());
        if let Err(message) = session.decide(&function_id, metadata.as_ref()) {
            let inv = invocation_id
                .clone()
                .unwrap_or_else(|| Uuid::new_v4().to_string());
            send(
                st,
                from,
                error_frame(&inv, &function_id, "FORBIDDEN", &message),
            );
            return;
        }
    }

    if function_id.starts_with("engine::") {
        let answer = builtin(st, from, &function_id, &data);
        if let (Some(inv), Some(answer)) = (invocation_id.as_deref(), answer) {
            let frame = match answer {
                Ok(v) => result_frame(inv, &function_id, &v),
                Err((code, message)) => error_frame(inv, &function_id, code, &message),
            };
            send(st, from, frame);
        }
        return;
    }

    if action == Some("enqueue") {
        if let Some(inv) = invocation_id.as_deref() {
            let message = format!(
                "No queue provider is installed. `TriggerAction::Enqueue` routes through the `engine::queue::enqueue` provider, which the standalone queue worker registers. Add it with `iii worker add queue`. (underlying: Function engine::queue::enqueue not found in namespace {DEFAULT_NAMESPACE})"
            );
            send(
                st,
                from,
                error_frame(inv, &function_id, "enqueue_error", &message),
            );
        }
        return;
    }

    let key = (namespace.clone(), function_id.clone());
    let Some(callee) = st.functions.get(&key).map(|f| f.owner) else {
        if let Some(inv) = invocation_id.as_deref() {
            let mut elsewhere: Vec<String> = st
                .functions
                .keys()
                .filter(|(ns, id)| id == &function_id && ns != &namespace)
                .map(|(ns, _)| ns.clone())
                .collect();
            elsewhere.sort();
            let mut message = format!("Function {function_id} not found in namespace {namespace}.");
            if !elsewhere.is_empty() {
                message.push_str(&format!(
                    " It is registered in namespace(s): {}.",
                    elsewhere.join(", ")
                ));
            }
            send(
                st,
                from,
                error_frame(inv, &function_id, "function_not_found", &message),
            );
        }
        return;
    };

    // The engine tells the handler who called by adding `_caller_worker_id`
    // to object payloads; other payloads pass untouched.
    let data = match data {
        Value::Object(mut m) => {
            m.insert("_caller_worker_id".into(), Value::String(from.to_string()));
            Value::Object(m)
        }
        other => other,
    };
    let void = action == Some("void") || invocation_id.is_none();
    // A prefixed registration is reached by its bus id; its SDK knows it
    // without the prefix.
    let local_id = st
        .workers
        .get(&callee)
        .and_then(|w| w.session.as_ref())
        .map(|s| s.local_id(&function_id).to_string())
        .unwrap_or_else(|| function_id.clone());
    let frame = encode(&ForwardFrame {
        r#type: "invokefunction",
        invocation_id: if void { None } else { invocation_id.as_deref() },
        function_id: &local_id,
        data: &data,
        metadata: msg.get("metadata"),
        traceparent: msg.get("traceparent"),
        baggage: msg.get("baggage"),
    });
    if !void {
        if let Some(inv) = invocation_id {
            st.pending.insert(
                inv,
                PendingCall {
                    caller: from,
                    callee,
                    function_id: function_id.clone(),
                },
            );
        }
    }
    send(st, callee, frame);
}

type BuiltinAnswer = Option<Result<Value, (&'static str, String)>>;

fn builtin(st: &mut State, from: Uuid, function_id: &str, data: &Value) -> BuiltinAnswer {
    match function_id {
        "engine::workers::register" => {
            register_worker_name(st, from, data);
            Some(Ok(Value::Null))
        }
        "engine::functions::list" => Some(Ok(functions_list(st, data))),
        "engine::functions::info" => Some(functions_info(st, data)),
        "engine::workers::list" => Some(Ok(workers_list(st))),
        "engine::triggers::list" => Some(Ok(triggers_list(st, data))),
        "engine::registered-triggers::list" => Some(Ok(registered_triggers_list(st, data))),
        other => Some(Err((
            "function_not_found",
            format!("Function {other} not found in namespace {DEFAULT_NAMESPACE}."),
        ))),
    }
}

fn include_internal(data: &Value) -> bool {
    data.get("include_internal")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The first `::` segment of `id`: the engine's `worker_name` for anything
/// whose owner it cannot name.
fn first_segment(id: &str) -> &str {
    id.split("::").next().unwrap_or(id)
}

/// The `worker_name` the engine reports for a function: its owner's name, or
/// the id's first `::` segment when the owner never named itself (or the
/// function is not registered). Never null.
fn worker_name_for(st: &State, owner: Option<Uuid>, function_id: &str) -> String {
    owner
        .and_then(|o| st.workers.get(&o))
        .and_then(|w| w.name.clone())
        .unwrap_or_else(|| first_segment(function_id).to_string())
}

fn function_owner_name(st: &State, function_id: &str) -> String {
    let owner = st
        .functions
        .iter()
        .find(|((_, id), _)| id == function_id)
        .map(|(_, f)| f.owner);
    worker_name_for(st, owner, function_id)
}

/// `engine::triggers::list`: declared trigger types sorted by id, the
/// engine's own `engine::*` types hidden unless `include_internal`.
fn triggers_list(st: &State, data: &Value) -> Value {
    let internal = include_internal(data);
    let triggers: Vec<Value> = st
        .trigger_types
        .iter()
        .filter(|(id, _)| internal || !id.starts_with("engine::"))
        .map(|(id, t)| {
            json!({
                "id": id,
                "description": t.description,
                "namespace": DEFAULT_NAMESPACE,
                "worker_name": worker_name_for(st, t.owner, id),
            })
        })
        .collect();
    json!({ "triggers": triggers })
}

/// The engine's `config_summary`: the config as compact JSON, cut after
/// this many characters (with an ellipsis).
const CONFIG_SUMMARY_MAX_LEN: usize = 80;

fn config_summary(config: &Value) -> String {
    let raw = serde_json::to_string(config).unwrap_or_else(|_| "{}".to_string());
    if raw.chars().count() <= CONFIG_SUMMARY_MAX_LEN {
        raw
    } else {
        let mut out: String = raw.chars().take(CONFIG_SUMMARY_MAX_LEN).collect();
        out.push('…');
        out
    }
}

/// `engine::registered-triggers::list`: live bindings sorted by id. A binding
/// whose type nobody declared is pending and not listed (transcripts/02:
/// `trg-2` of the unknown type `nope` is absent); bindings targeting
/// `engine::*` functions are hidden unless `include_internal`.
fn registered_triggers_list(st: &State, data: &Value) -> Value {
    let internal = include_internal(data);
    let listed: Vec<Value> = st
        .triggers
        .values()
        .filter(|b| st.is_live(b))
        .filter(|b| internal || !b.function_id.starts_with("engine::"))
        .map(|b| {
            json!({
                "id": b.id,
                "trigger_type": b.trigger_type,
                "function_id": b.function_id,
                "config": b.config,
                "config_summary": config_summary(&b.config),
                "worker_name": function_owner_name(st, &b.function_id),
            })
        })
        .collect();
    json!({ "registered_triggers": listed })
}

fn register_worker_name(st: &mut State, from: Uuid, data: &Value) {
    let name = data.get("name").and_then(Value::as_str).map(str::to_string);
    let namespace = data
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_string();
    if let Some(name) = &name {
        let owner = st
            .workers
            .iter()
            .find(|(id, w)| {
                **id != from && w.name.as_deref() == Some(name) && w.namespace == namespace
            })
            .map(|(id, _)| *id);
        if let Some(owner) = owner {
            let frame = json!({
                "code": "WORKER_NAMESPACE_CONFLICT",
                "namespace": namespace,
                "worker_name": name,
                "owner_worker_id": owner.to_string(),
            });
            send(st, from, ordered_rejection(&frame));
            if let Some(w) = st.workers.get(&from) {
                let _ = w.tx.send(Outbound::Close);
            }
            // Its held registrations are dropped with it.
            if let Some(w) = st.workers.get_mut(&from) {
                w.held.clear();
            }
            return;
        }
    }
    if let Some(w) = st.workers.get_mut(&from) {
        w.name = name;
        w.namespace = namespace;
        w.metadata = data.clone();
    }
    flush_held(st, from);
}

fn is_internal(f: &Function) -> bool {
    f.metadata
        .as_ref()
        .and_then(|m| m.get("internal"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn functions_list(st: &State, data: &Value) -> Value {
    let search = data
        .get("search")
        .and_then(Value::as_str)
        .map(str::to_lowercase);
    let prefix = data.get("prefix").and_then(Value::as_str);
    let worker = data.get("worker").and_then(Value::as_str);
    let include_internal = include_internal(data);
    let mut out: Vec<(String, Value)> = Vec::new();
    for ((ns, id), f) in &st.functions {
        if !include_internal && (id.starts_with("engine::") || is_internal(f)) {
            continue;
        }
        if prefix.is_some_and(|p| !id.starts_with(p)) {
            continue;
        }
        let worker_name = worker_name_for(st, Some(f.owner), id);
        if worker.is_some_and(|w| worker_name != w) {
            continue;
        }
        if let Some(s) = &search {
            let hay = format!("{} {}", id, f.description.as_deref().unwrap_or("")).to_lowercase();
            if !hay.contains(s.as_str()) {
                continue;
            }
        }
        let mut entry = Map::new();
        entry.insert("function_id".into(), json!(id));
        entry.insert("namespace".into(), json!(ns));
        entry.insert("worker_name".into(), json!(worker_name));
        if let Some(d) = &f.description {
            entry.insert("description".into(), json!(d));
        }
        if let Some(m) = &f.metadata {
            entry.insert("metadata".into(), m.clone());
        }
        out.push((id.clone(), Value::Object(entry)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    json!({ "functions": out.into_iter().map(|(_, v)| v).collect::<Vec<_>>() })
}

fn info_entry(st: &State, function_id: &str) -> Option<Value> {
    let ((ns, _), f) = st.functions.iter().find(|((_, id), _)| id == function_id)?;
    let mut entry = Map::new();
    entry.insert("function_id".into(), json!(function_id));
    entry.insert("namespace".into(), json!(ns));
    entry.insert(
        "worker_name".into(),
        json!(worker_name_for(st, Some(f.owner), function_id)),
    );
    if let Some(d) = &f.description {
        entry.insert("description".into(), json!(d));
    }
    if let Some(m) = &f.metadata {
        entry.insert("metadata".into(), m.clone());
    }
    // The engine answers the registered formats under new names.
    if let Some(r) = &f.request_format {
        entry.insert("request_schema".into(), r.clone());
    }
    if let Some(r) = &f.response_format {
        entry.insert("response_schema".into(), r.clone());
    }
    let triggers: Vec<Value> = st
        .triggers
        .values()
        .filter(|b| b.function_id == function_id && st.is_live(b))
        .map(|b| json!({"id": b.id, "trigger_type": b.trigger_type, "config": b.config}))
        .collect();
    entry.insert("registered_triggers".into(), Value::Array(triggers));
    Some(Value::Object(entry))
}

fn functions_info(st: &State, data: &Value) -> Result<Value, (&'static str, String)> {
    if let Some(ids) = data.get("function_ids").and_then(Value::as_array) {
        if ids.len() > INFO_BATCH_MAX {
            return Err((
                "INVALID_ARGUMENTS",
                format!("`function_ids` accepts at most {INFO_BATCH_MAX} ids"),
            ));
        }
        let functions: Vec<Value> = ids
            .iter()
            .map(|id| {
                let id = id.as_str().unwrap_or_default();
                info_entry(st, id)
                    .unwrap_or_else(|| json!({"function_id": id, "error": "not_found"}))
            })
            .collect();
        return Ok(json!({ "functions": functions }));
    }
    match data.get("function_id").and_then(Value::as_str) {
        Some(id) => info_entry(st, id)
            .ok_or_else(|| ("NOT_FOUND", format!("Function '{id}' is not registered."))),
        None => Err((
            "INVALID_ARGUMENTS",
            "missing field `function_id` (or `function_ids` for a batch)".to_string(),
        )),
    }
}

/// `engine::workers::list`, as the engine builds it: the connections that
/// reported a `pid` through `engine::workers::register` (the others, a raw
/// client or a worker that never named itself, are not listed; transcripts/01),
/// then the engine's in-process workers, sorted by name (or id) and id.
fn workers_list(st: &State) -> Value {
    let mut rows: Vec<(String, String, Value)> = Vec::new();
    for (uuid, w) in &st.workers {
        if w.metadata.get("pid").is_none_or(Value::is_null) {
            continue;
        }
        let id = uuid.to_string();
        let count = st.functions.values().filter(|f| f.owner == *uuid).count();
        let row = json!({
            "id": id,
            "name": w.name,
            "namespace": w.namespace,
            "runtime": w.metadata.get("runtime").and_then(Value::as_str).unwrap_or("unknown"),
            "version": w.metadata.get("version"),
            "os": w.metadata.get("os"),
            "description": w.metadata.get("description"),
            "function_count": count,
            "active_invocations": st.pending.values().filter(|p| p.callee == *uuid).count(),
            "connected_at_ms": w.connected_at_ms as u64,
            "ip_address": Value::Null,
            "isolation": w.metadata.get("isolation"),
            // The engine never moves a socket worker off its initial status.
            "status": "connected",
        });
        rows.push((w.name.clone().unwrap_or_else(|| id.clone()), id, row));
    }
    for (name, description, count) in IN_PROCESS_WORKERS {
        let row = json!({
            "id": name,
            "name": name,
            "namespace": DEFAULT_NAMESPACE,
            "runtime": "engine",
            "version": ENGINE_VERSION,
            "os": Value::Null,
            "description": description,
            "function_count": count,
            "active_invocations": 0,
            "connected_at_ms": st.started_at_ms as u64,
            "ip_address": Value::Null,
            "isolation": "in-process",
            "status": "available",
        });
        rows.push((name.to_string(), name.to_string(), row));
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    json!({ "workers": rows.into_iter().map(|(_, _, row)| row).collect::<Vec<_>>() })
}
