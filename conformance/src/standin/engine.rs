//! A loopback stand-in of the iii engine.
//!
//! It speaks the worker protocol exactly as the real engine was observed to
//! (`docs/engine.md` and the recorded transcripts): the same
//! frames, field order, error codes and messages, so that a worker that works
//! here works on a real engine. It knows nothing about sandboxes; the daemon
//! double connects to it like any other worker.
//!
//! A second, RBAC-gated listener (the guest listener) is modelled in
//! [`rbac`]: authentication by a function, call gating, prefixes, the
//! function, trigger and trigger-type registration hooks ([`admit`]) and the
//! listener's middleware ([`middleware`]). The main listener authenticates
//! nothing and has no middleware.
//!
//! Data channels (`engine::channels::create` and the `/ws/channels/{id}`
//! sockets, on every listener) are modelled in [`channels`].
//!
//! Deliberately absent: queues (`enqueue` answers
//! `enqueue_error` exactly as an engine without a queue worker does),
//! observe/local-dispatch (the recorded engine advertised no
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

mod admit;
mod builtin;
mod calls;
mod channels;
mod frames;
mod frames_in;
mod invoke;
mod middleware;
mod rbac;
mod sockets;
use admit::*;
use builtin::*;
use calls::*;
use frames::*;
use frames_in::*;
use invoke::*;
use middleware::*;
use rbac::{AuthResult, Session};
pub use rbac::{FunctionFilter, GuestListener, RbacConfig, CARVE_OUT};
use sockets::*;

/// How long an engine-originated call (auth, registration hook) may take.
const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call through a listener's middleware may take. The engine sets
/// no deadline of its own on it; this only bounds a stand-in task.
const MIDDLEWARE_CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the real engine holds a worker's registrations back while it waits
/// for the worker to name itself through `engine::workers::register`.
pub const NAME_GRACE: Duration = Duration::from_secs(5);

/// The namespace an invocation without `namespace` resolves in.
const DEFAULT_NAMESPACE: &str = "default";

/// Upper bound of a batched `engine::functions::info`.
const INFO_BATCH_MAX: usize = 32;

/// The engine release this module stands in for (`fixtures/transcripts`
/// were recorded on it); its in-process workers report it as their version.
pub(crate) const ENGINE_VERSION: &str = "0.23.0-rc.4";

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
    /// The engine config's `registration_namespace_grace_ms`: how long a
    /// connection's registrations wait for it to name itself (default
    /// [`NAME_GRACE`]).
    pub name_grace: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            host: Ipv4Addr::LOCALHOST,
            port: 0,
            guest: None,
            name_grace: NAME_GRACE,
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
        let mut fresh = State::new();
        fresh.name_grace = options.name_grace;
        let state: Shared = Arc::new(Mutex::new(fresh));
        let listener = TcpListener::bind((options.host, options.port)).await?;
        let addr = listener.local_addr()?;
        let mut stops = Vec::new();
        let mut tasks = Vec::new();
        let (stop, task) = accept_loop(listener, state.clone(), None);
        stops.push(stop);
        tasks.push(task);
        let (stop, task) = channels::sweeper(state.clone());
        stops.push(stop);
        tasks.push(task);
        let mut guest_addr = None;
        if let Some(g) = options.guest {
            let listener = TcpListener::bind((g.host, g.port)).await?;
            guest_addr = Some(listener.local_addr()?);
            let (stop, task) = accept_loop(listener, state.clone(), Some(Arc::new(g)));
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

    /// The relayed calls that were forwarded at or after `since` and are
    /// answered, oldest first (the last 256 relays are kept).
    pub fn relays_since(&self, since: std::time::Instant) -> Vec<Relay> {
        lock(&self.state)
            .relays
            .iter()
            .filter(|r| r.forwarded_at >= since)
            .cloned()
            .collect()
    }

    /// Names of the live, named workers. For tests and leak checks.
    pub fn worker_names(&self) -> Vec<String> {
        let st = lock(&self.state);
        let mut names: Vec<String> = st.workers.values().filter_map(|w| w.name.clone()).collect();
        names.sort();
        names
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
        let mut st = lock(&self.state);
        for w in st.workers.values() {
            let _ = w.tx.send(Outbound::Close);
        }
        st.channels.close_all();
    }
}

impl Drop for StandInEngine {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        let mut st = lock(&self.state);
        for w in st.workers.values() {
            let _ = w.tx.send(Outbound::Close);
        }
        st.channels.close_all();
    }
}

type Shared = Arc<Mutex<State>>;

/// Accepts connections on `listener` until stopped; `rbac` (a guest
/// listener's config) gates them.
fn accept_loop(
    listener: TcpListener,
    state: Shared,
    rbac: Option<Arc<GuestListener>>,
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
    /// How long a connection's registrations wait for its name.
    name_grace: Duration,
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
    /// Calls the engine itself made (auth, hooks, middleware), by invocation id.
    engine_calls: HashMap<String, EngineCall>,
    /// The last relayed calls' timings, oldest first (bounded).
    relays: std::collections::VecDeque<Relay>,
    /// Data channels, shared by every listener.
    channels: channels::Channels,
}

/// How many relayed calls' timings the engine keeps.
const RELAYS_KEPT: usize = 256;

/// One call the engine relayed and saw answered: when it forwarded the call
/// to its owner and when the answer came back. What lies between is the
/// callee's share of the call, as the engine sees it; benches subtract the
/// daemon's share from what their caller saw.
#[derive(Debug, Clone)]
pub struct Relay {
    pub function_id: String,
    pub forwarded_at: std::time::Instant,
    pub answered_at: std::time::Instant,
    /// The size of the forwarded `invokefunction` frame and of the relayed
    /// answer: what the callee's SDK (or the caller's) could record of it.
    pub request_bytes: usize,
    pub answer_bytes: usize,
}

/// An engine-originated call awaiting its answer: who serves it, and where
/// the answer goes.
struct EngineCall {
    callee: Uuid,
    answer: oneshot::Sender<Result<Value, CallError>>,
}

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
            name_grace: NAME_GRACE,
            workers: HashMap::new(),
            functions: BTreeMap::new(),
            pending: HashMap::new(),
            trigger_types,
            triggers: BTreeMap::new(),
            started_at_ms: now_ms(),
            telemetry: std::collections::VecDeque::new(),
            relays: std::collections::VecDeque::new(),
            telemetry_bytes: 0,
            engine_calls: HashMap::new(),
            channels: channels::Channels::default(),
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
    forwarded_at: std::time::Instant,
    request_bytes: usize,
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
    /// Handed to the provider with the binding, when the registration had it.
    metadata: Option<Value>,
    owner: Uuid,
}
