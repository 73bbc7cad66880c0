//! Replays the frames recorded on the real iii engine against the stand-in.
//!
//! `fixtures/transcripts/*.log` hold raw WebSocket traffic between
//! hand-written clients and the real engine (see their README). For each
//! transcript this test opens one raw WebSocket per connection label (`A`,
//! `B`, `C`, `W1`, …) to a fresh [`StandInEngine`], sends every `X->` frame in
//! order, and compares every `X<-` frame the real engine sent with the next
//! frame the stand-in sends on that connection:
//!
//! - as JSON, with engine-generated ids (uuids: worker ids, reattach tokens,
//!   invocation ids; traceparents) masked *consistently*: a real id maps to
//!   one stand-in id for the whole transcript and back, so `_caller_worker_id`
//!   must be the `worker_id` the caller was greeted with, `owner_worker_id`
//!   the owner's, and so on. Ids a client chose itself are sent unchanged and
//!   must come back unchanged. `connected_at_ms` is a timestamp: only its type
//!   is compared;
//! - with the keys of every object in the real frame's order.
//!
//! Where the recording involves what the stand-in deliberately does not have
//! (the engine's built-in `configuration` worker and `iii-observability`),
//! the difference is handled explicitly and printed: those entries are dropped
//! from the real frame before comparing, and the `configuration::*` calls of
//! transcripts/03 (and their trigger fan-out) are skipped. Wherever anything
//! else differs, the stand-in is the bug.
//!
//! Replay mechanics: before a client acts on one connection, every other
//! connection it has written to is synchronised with a WebSocket ping (the
//! engine handles a socket's frames in order, so its pong means the frames
//! before it were processed); a `X (no frame within Ns)` note is checked over
//! [`SILENCE`], not N seconds; `X closed` drops the socket without a closing
//! handshake, as the recorded 1006 close did. A call the real engine routed to
//! a worker whose registrations the stand-in still holds back (the 5 s naming
//! grace of transcripts/02) is sent once the function is visible, waiting on
//! that condition with a deadline past the grace.
//!
//! The transcripts are read from `$III_TRANSCRIPTS` (a newer recording), else
//! from the repository's own `fixtures/transcripts`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use code_runner_conformance::standin::engine::{StandInEngine, NAME_GRACE};
use futures_util::{SinkExt, StreamExt};
use regex::Regex;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a frame the real engine sent may take to arrive from the stand-in.
const FRAME_DEADLINE: Duration = Duration::from_secs(5);
/// The window a `(no frame within Ns)` note is checked over.
const SILENCE: Duration = Duration::from_millis(300);
/// How long a connection may take to answer the synchronising ping.
const SYNC_DEADLINE: Duration = Duration::from_secs(5);
/// How long a call waits for its function to become routable: past the
/// naming grace, with slack for a loaded machine.
const GRACE_DEADLINE: Duration = NAME_GRACE.saturating_add(Duration::from_millis(1500));
/// Longer than this to become routable is the grace, not scheduling noise.
const ROUTABLE_AT_ONCE: Duration = Duration::from_millis(250);

/// Worker names of the engine's built-in workers the stand-in deliberately
/// does not have.
const ABSENT_WORKERS: &[&str] = &["configuration", "iii-observability"];
/// Id prefixes of the functions and bindings of those workers.
const ABSENT_ID_PREFIXES: &[&str] = &["configuration::", "iii-observability"];
/// The trigger type only the built-in configuration worker declares.
const CONFIGURATION_TRIGGER_TYPE: &str = "configuration";

// ---- an order-preserving JSON tree ----

/// A JSON value that keeps object keys in document order (`serde_json::Value`
/// sorts them), so key order can be compared and client frames re-sent as
/// they were recorded.
#[derive(Clone, Debug, PartialEq)]
enum J {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut J> {
        match self {
            J::Obj(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str_at(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(J::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn compact(&self) -> String {
        serde_json::to_string(self).expect("a parsed frame serializes")
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<J, E> {
                Ok(J::Num(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<J, E> {
                serde_json::Number::from_f64(n)
                    .map(J::Num)
                    .ok_or_else(|| E::custom("a non-finite number"))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<J, E> {
                Ok(J::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(J::Arr(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, J>()? {
                    entries.push((k, v));
                }
                Ok(J::Obj(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for J {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Num(n) => n.serialize(s),
            J::Str(v) => s.serialize_str(v),
            J::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            J::Obj(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

fn parse(text: &str) -> Result<J, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON ({e}): {text}"))
}

// ---- ids ----

/// Engine-generated ids: uuids (worker ids, reattach tokens, invocation ids)
/// and W3C traceparents.
fn id_pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?i)\b00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        )
        .expect("id pattern")
    })
}

/// Keys whose values are timestamps: compared by type only.
const VOLATILE_KEYS: &[&str] = &["connected_at_ms"];

/// The one-to-one map between the ids of the recording and the stand-in's.
#[derive(Default)]
struct Ids {
    real_to_stand_in: HashMap<String, String>,
    stand_in_to_real: HashMap<String, String>,
}

impl Ids {
    /// Pairs a real id with a stand-in id, or says why they cannot pair.
    fn bind(&mut self, real: &str, stand_in: &str) -> Result<(), String> {
        match (
            self.real_to_stand_in.get(real),
            self.stand_in_to_real.get(stand_in),
        ) {
            (None, None) => {
                self.real_to_stand_in
                    .insert(real.to_string(), stand_in.to_string());
                self.stand_in_to_real
                    .insert(stand_in.to_string(), real.to_string());
                Ok(())
            }
            (Some(s), _) if s == stand_in => Ok(()),
            (Some(s), _) => Err(format!(
                "real id {real} stands for stand-in id {s} elsewhere, here for {stand_in}"
            )),
            (None, Some(r)) => Err(format!(
                "stand-in id {stand_in} stands for real id {r} elsewhere, here for {real}"
            )),
        }
    }

    /// A client frame as the stand-in's client would send it: every id the
    /// client learnt from the engine replaced by the stand-in's. Ids the
    /// client made up itself go out unchanged and must come back unchanged.
    fn outgoing(&mut self, frame: &J) -> J {
        match frame {
            J::Str(s) => {
                let re = id_pattern();
                let mut out = String::with_capacity(s.len());
                let mut last = 0;
                for m in re.find_iter(s) {
                    out.push_str(&s[last..m.start()]);
                    let real = m.as_str();
                    if !self.real_to_stand_in.contains_key(real) {
                        let _ = self.bind(real, real);
                    }
                    out.push_str(&self.real_to_stand_in[real]);
                    last = m.end();
                }
                out.push_str(&s[last..]);
                J::Str(out)
            }
            J::Arr(items) => J::Arr(items.iter().map(|i| self.outgoing(i)).collect()),
            J::Obj(entries) => J::Obj(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), self.outgoing(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

// ---- comparison ----

/// Compares a real frame with the stand-in's: values with ids masked
/// through `ids`, and the key order of every object. Differences are
/// appended to `diffs`, one line each, with a JSON path.
fn compare(real: &J, stand_in: &J, path: &str, ids: &mut Ids, diffs: &mut Vec<String>) {
    match (real, stand_in) {
        (J::Obj(re), J::Obj(se)) => {
            let rk: Vec<&str> = re.iter().map(|(k, _)| k.as_str()).collect();
            let sk: Vec<&str> = se.iter().map(|(k, _)| k.as_str()).collect();
            if rk != sk {
                diffs.push(format!("{path}: keys {rk:?} (real) vs {sk:?} (stand-in)"));
            }
            for (k, rv) in re {
                let Some(sv) = stand_in.get(k) else { continue };
                let sub = format!("{path}.{k}");
                if VOLATILE_KEYS.contains(&k.as_str()) {
                    if std::mem::discriminant(rv) != std::mem::discriminant(sv) {
                        diffs.push(format!(
                            "{sub}: {} (real) vs {} (stand-in), a different type",
                            rv.compact(),
                            sv.compact()
                        ));
                    }
                    continue;
                }
                compare(rv, sv, &sub, ids, diffs);
            }
        }
        (J::Arr(ra), J::Arr(sa)) => {
            if ra.len() != sa.len() {
                diffs.push(format!(
                    "{path}: {} items (real) vs {} (stand-in):\n      real:     {}\n      stand-in: {}",
                    ra.len(),
                    sa.len(),
                    real.compact(),
                    stand_in.compact()
                ));
                return;
            }
            for (i, (rv, sv)) in ra.iter().zip(sa).enumerate() {
                compare(rv, sv, &format!("{path}[{i}]"), ids, diffs);
            }
        }
        (J::Str(r), J::Str(s)) => {
            let re = id_pattern();
            let r_ids: Vec<&str> = re.find_iter(r).map(|m| m.as_str()).collect();
            let s_ids: Vec<&str> = re.find_iter(s).map(|m| m.as_str()).collect();
            if re.replace_all(r, "<id>") != re.replace_all(s, "<id>") || r_ids.len() != s_ids.len()
            {
                diffs.push(format!("{path}: {r:?} (real) vs {s:?} (stand-in)"));
                return;
            }
            for (ri, si) in r_ids.iter().zip(&s_ids) {
                if let Err(e) = ids.bind(ri, si) {
                    diffs.push(format!("{path}: {e}"));
                }
            }
        }
        (r, s) => {
            if r != s {
                diffs.push(format!(
                    "{path}: {} (real) vs {} (stand-in)",
                    r.compact(),
                    s.compact()
                ));
            }
        }
    }
}

// ---- what the stand-in deliberately does not have ----

/// Why the stand-in cannot show `entry` (a row of an `engine::*` listing), or
/// `None` when it must.
fn absent_from_stand_in(entry: &J) -> Option<String> {
    for key in ["worker_name", "name"] {
        if let Some(w) = entry.str_at(key).filter(|w| ABSENT_WORKERS.contains(w)) {
            return Some(format!(
                "belongs to the engine's built-in `{w}` worker, which the stand-in deliberately does not have"
            ));
        }
    }
    for key in ["function_id", "id"] {
        if let Some(id) = entry.str_at(key) {
            if let Some(p) = ABSENT_ID_PREFIXES.iter().find(|p| id.starts_with(*p)) {
                return Some(format!(
                    "`{id}` (prefix `{p}`) belongs to a built-in worker the stand-in deliberately does not have"
                ));
            }
        }
    }
    if entry.str_at("trigger_type") == Some(CONFIGURATION_TRIGGER_TYPE) {
        return Some(
            "bound to the `configuration` trigger type, which only the engine's built-in configuration \
             worker declares; on the stand-in (no such worker) the binding stays pending, hence unlisted"
                .to_string(),
        );
    }
    None
}

/// Drops, from the real answer of an `engine::*` listing, the rows the
/// stand-in deliberately cannot have; returns one note per dropped row.
fn drop_absent_rows(frame: &mut J) -> Vec<String> {
    let mut notes = Vec::new();
    if frame.str_at("type") != Some("invocationresult") {
        return notes;
    }
    let Some(function_id) = frame.str_at("function_id").map(str::to_string) else {
        return notes;
    };
    let Some(result) = frame.get_mut("result") else {
        return notes;
    };
    let mut drop_from = |list: Option<&mut J>, what: &str| {
        if let Some(J::Arr(items)) = list {
            items.retain(|item| match absent_from_stand_in(item) {
                Some(why) => {
                    notes.push(format!("{what}: dropped {} — {why}", item.compact()));
                    false
                }
                None => true,
            });
        }
    };
    match function_id.as_str() {
        "engine::functions::list" => drop_from(result.get_mut("functions"), "functions"),
        "engine::workers::list" => drop_from(result.get_mut("workers"), "workers"),
        "engine::triggers::list" => drop_from(result.get_mut("triggers"), "triggers"),
        "engine::registered-triggers::list" => {
            drop_from(result.get_mut("registered_triggers"), "registered_triggers")
        }
        "engine::functions::info" => {
            // Single form, then batch form.
            drop_from(result.get_mut("registered_triggers"), "registered_triggers");
            if let Some(J::Arr(entries)) = result.get_mut("functions") {
                for entry in entries {
                    drop_from(
                        entry.get_mut("registered_triggers"),
                        "functions[].registered_triggers",
                    );
                }
            }
        }
        _ => {}
    }
    notes
}

/// Why a frame belongs to the configuration worker's traffic (skipped, as the
/// stand-in attaches no configuration worker), or `None`.
fn configuration_traffic(frame: &J, skipped: &HashSet<String>) -> Option<String> {
    if let Some(inv) = frame.str_at("invocation_id") {
        if skipped.contains(inv) {
            return Some(format!(
                "belongs to skipped configuration-worker invocation {inv}"
            ));
        }
    }
    let kind = frame.str_at("type");
    if kind == Some("invokefunction") {
        if let Some(f) = frame
            .str_at("function_id")
            .filter(|f| f.starts_with("configuration::"))
        {
            return Some(format!(
                "calls `{f}`: the stand-in attaches no configuration worker (deliberately absent)"
            ));
        }
        let data = frame.get("data");
        let fan_out = data.and_then(|d| d.str_at("type")) == Some(CONFIGURATION_TRIGGER_TYPE)
            && data
                .and_then(|d| d.str_at("event_type"))
                .is_some_and(|e| e.starts_with("configuration:"));
        if fan_out {
            return Some(
                "the configuration worker's trigger fan-out: no configuration worker on the stand-in, \
                 so nothing fires"
                    .to_string(),
            );
        }
    }
    None
}

// ---- transcripts ----

#[derive(Debug)]
enum Step {
    Section(String),
    Send {
        conn: String,
        frame: J,
        /// `(namespace, function_id)` when the real engine routed this call to
        /// a worker (its next frame with this invocation id is the forward).
        routed: Option<(String, String)>,
    },
    Expect {
        conn: String,
        frame: J,
    },
    Close {
        conn: String,
    },
    Silence {
        conn: String,
        recorded: String,
    },
}

#[derive(Debug)]
struct Line {
    no: usize,
    step: Step,
}

fn transcripts_dir() -> PathBuf {
    match std::env::var_os("III_TRANSCRIPTS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/transcripts"),
    }
}

fn read_transcript(name: &str) -> String {
    let path = transcripts_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the recorded transcript {} ({e}); it ships in \
             fixtures/transcripts (or set III_TRANSCRIPTS)",
            path.display()
        )
    })
}

/// Parses a transcript. Every line is accounted for: frames, sections,
/// closes, silences; timings (`T`, `LATENCY`) are ignored; anything else is
/// an error, never skipped.
fn parse_transcript(name: &str, text: &str) -> Vec<Line> {
    let frame_re = Regex::new(r"^([A-Z][A-Z0-9]*)(->|<-) (\{.*\})$").unwrap();
    let close_re = Regex::new(r"^([A-Z][A-Z0-9]*) closed\b").unwrap();
    let silence_re = Regex::new(r"^([A-Z][A-Z0-9]*) \(no frame within ([0-9.]+)s\)$").unwrap();
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        let line = raw.trim_end();
        let step = if line.is_empty() || line.starts_with("T ") || line.starts_with("LATENCY ") {
            continue;
        } else if let Some(title) = line.strip_prefix("== ") {
            Step::Section(title.to_string())
        } else if let Some(c) = frame_re.captures(line) {
            let frame = parse(&c[3]).unwrap_or_else(|e| panic!("{name}:{no}: {e}"));
            let conn = c[1].to_string();
            if &c[2] == "->" {
                Step::Send {
                    conn,
                    frame,
                    routed: None,
                }
            } else {
                Step::Expect { conn, frame }
            }
        } else if let Some(c) = close_re.captures(line) {
            Step::Close {
                conn: c[1].to_string(),
            }
        } else if let Some(c) = silence_re.captures(line) {
            Step::Silence {
                conn: c[1].to_string(),
                recorded: c[2].to_string(),
            }
        } else {
            panic!("{name}:{no}: a line this replay does not understand: {line}");
        };
        lines.push(Line { no, step });
    }
    // Which synchronous calls did the real engine route to a worker?
    let mut forwarded: HashMap<String, usize> = HashMap::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (idx, l) in lines.iter().enumerate() {
        if let Step::Expect { frame, .. } = &l.step {
            if let Some(inv) = frame.str_at("invocation_id") {
                if answered.insert(inv.to_string())
                    && frame.str_at("type") == Some("invokefunction")
                {
                    forwarded.insert(inv.to_string(), idx);
                }
            }
        }
    }
    for (idx, l) in lines.iter_mut().enumerate() {
        if let Step::Send { frame, routed, .. } = &mut l.step {
            let call =
                frame.str_at("type") == Some("invokefunction") && frame.get("action").is_none();
            let fwd = frame
                .str_at("invocation_id")
                .and_then(|inv| forwarded.get(inv))
                .is_some_and(|at| *at > idx);
            if call && fwd {
                *routed = Some((
                    frame.str_at("namespace").unwrap_or("default").to_string(),
                    frame.str_at("function_id").unwrap_or_default().to_string(),
                ));
            }
        }
    }
    lines
}

// ---- the replay ----

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

enum Incoming {
    Text(String),
    Closed,
}

/// One client connection of the transcript.
struct Conn {
    ws: Ws,
    /// Frames read while synchronising, not yet compared.
    queue: VecDeque<String>,
    /// Written to since the last synchronisation.
    dirty: bool,
    /// Closed by the engine.
    closed: bool,
}

impl Conn {
    /// The next text frame (`None` when `until` passes first).
    async fn next(&mut self, until: Instant) -> Option<Incoming> {
        if let Some(text) = self.queue.pop_front() {
            return Some(Incoming::Text(text));
        }
        if self.closed {
            return Some(Incoming::Closed);
        }
        loop {
            match tokio::time::timeout_at(until, self.ws.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(Message::Text(t)))) => return Some(Incoming::Text(t.to_string())),
                Ok(Some(Ok(Message::Binary(b)))) => {
                    return Some(Incoming::Text(String::from_utf8_lossy(&b).into_owned()))
                }
                Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => {
                    self.closed = true;
                    return Some(Incoming::Closed);
                }
                Ok(Some(Ok(_))) => continue, // pings and pongs
            }
        }
    }

    /// Waits until the engine has handled every frame written so far: it
    /// handles a socket's frames in order, so the pong to a ping sent now
    /// comes after them. Text frames read meanwhile are queued.
    async fn sync(&mut self, seq: u64, label: &str) {
        self.dirty = false;
        if self.closed {
            return;
        }
        let payload = seq.to_be_bytes();
        if self
            .ws
            .send(Message::Ping(payload.to_vec().into()))
            .await
            .is_err()
        {
            self.closed = true;
            return;
        }
        let until = Instant::now() + SYNC_DEADLINE;
        loop {
            match tokio::time::timeout_at(until, self.ws.next()).await {
                Err(_) => panic!(
                    "connection {label}: no pong within {SYNC_DEADLINE:?}; the stand-in stopped reading it"
                ),
                Ok(Some(Ok(Message::Pong(p)))) if p.as_ref() == payload => return,
                Ok(Some(Ok(Message::Text(t)))) => self.queue.push_back(t.to_string()),
                Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => {
                    self.closed = true;
                    return;
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }
}

struct Replay<'a> {
    name: &'a str,
    engine: &'a StandInEngine,
    conns: BTreeMap<String, Conn>,
    ids: Ids,
    /// Invocation ids of skipped configuration-worker traffic.
    skipped: HashSet<String>,
    section: String,
    seq: u64,
    failures: Vec<String>,
    compared: usize,
    notes: usize,
}

impl<'a> Replay<'a> {
    fn note(&mut self, no: usize, what: &str) {
        self.notes += 1;
        println!("{}:{no} [{}] {what}", self.name, self.section);
    }

    fn fail(&mut self, no: usize, what: String) {
        self.failures
            .push(format!("{}:{no} [{}] {what}", self.name, self.section));
    }

    /// Synchronises every connection written to since its last sync, except
    /// `but`.
    async fn sync_others(&mut self, but: Option<&str>) {
        for (label, conn) in self.conns.iter_mut() {
            if conn.dirty && Some(label.as_str()) != but {
                self.seq += 1;
                conn.sync(self.seq, label).await;
            }
        }
    }

    async fn conn(&mut self, label: &str) -> &mut Conn {
        if !self.conns.contains_key(label) {
            self.sync_others(None).await;
            let (ws, _) = tokio_tungstenite::connect_async(self.engine.url())
                .await
                .unwrap_or_else(|e| panic!("connection {label} to the stand-in: {e}"));
            self.conns.insert(
                label.to_string(),
                Conn {
                    ws,
                    queue: VecDeque::new(),
                    dirty: false,
                    closed: false,
                },
            );
        }
        self.conns.get_mut(label).expect("just opened")
    }

    async fn run(&mut self, lines: &[Line]) {
        for line in lines {
            let no = line.no;
            match &line.step {
                Step::Section(title) => {
                    self.section = title.clone();
                }
                Step::Send {
                    conn,
                    frame,
                    routed,
                } => {
                    if let Some(why) = configuration_traffic(frame, &self.skipped) {
                        if let Some(inv) = frame.str_at("invocation_id") {
                            self.skipped.insert(inv.to_string());
                        }
                        self.note(no, &format!("SKIP {conn}-> ({why}): {}", frame.compact()));
                        continue;
                    }
                    self.sync_others(Some(conn)).await;
                    self.conn(conn).await;
                    if let Some((namespace, function_id)) = routed {
                        self.await_routable(no, namespace, function_id).await;
                    }
                    let text = self.ids.outgoing(frame).compact();
                    let c = self.conn(conn).await;
                    c.ws.send(Message::Text(text.into()))
                        .await
                        .unwrap_or_else(|e| panic!("{conn}-> send failed: {e}"));
                    c.dirty = true;
                }
                Step::Expect { conn, frame } => {
                    if let Some(why) = configuration_traffic(frame, &self.skipped) {
                        if let Some(inv) = frame.str_at("invocation_id") {
                            self.skipped.insert(inv.to_string());
                        }
                        self.note(no, &format!("SKIP {conn}<- ({why}): {}", frame.compact()));
                        continue;
                    }
                    let mut real = frame.clone();
                    for n in drop_absent_rows(&mut real) {
                        self.note(no, &format!("FILTER {conn}<- {n}"));
                    }
                    let got = self
                        .conn(conn)
                        .await
                        .next(Instant::now() + FRAME_DEADLINE)
                        .await;
                    self.compared += 1;
                    match got {
                        None => self.fail(
                            no,
                            format!(
                                "{conn}<- nothing within {FRAME_DEADLINE:?}; the real engine sent {}",
                                frame.compact()
                            ),
                        ),
                        Some(Incoming::Closed) => self.fail(
                            no,
                            format!(
                                "{conn}<- the stand-in closed the connection; the real engine sent {}",
                                frame.compact()
                            ),
                        ),
                        Some(Incoming::Text(text)) => match parse(&text) {
                            Err(e) => self.fail(no, format!("{conn}<- {e}")),
                            Ok(stand_in) => {
                                let mut diffs = Vec::new();
                                compare(&real, &stand_in, "$", &mut self.ids, &mut diffs);
                                if !diffs.is_empty() {
                                    let mut msg = format!("{conn}<- differs:");
                                    for d in &diffs {
                                        let _ = write!(msg, "\n    {d}");
                                    }
                                    let _ = write!(
                                        msg,
                                        "\n    real:     {}\n    stand-in: {text}",
                                        real.compact()
                                    );
                                    self.fail(no, msg);
                                }
                            }
                        },
                    }
                }
                Step::Close { conn } => {
                    self.sync_others(Some(conn)).await;
                    match self.conns.remove(conn) {
                        // Dropped without a closing handshake: the recorded
                        // close was 1006 (abnormal).
                        Some(c) => drop(c),
                        None => panic!("{}:{no}: {conn} closed before it was opened", self.name),
                    }
                }
                Step::Silence { conn, recorded } => {
                    self.sync_others(None).await;
                    let got = self.conn(conn).await.next(Instant::now() + SILENCE).await;
                    match got {
                        None => {}
                        Some(Incoming::Text(text)) => self.fail(
                            no,
                            format!(
                                "{conn}: the real engine sent nothing within {recorded}s, the stand-in sent {text}"
                            ),
                        ),
                        Some(Incoming::Closed) => self.fail(
                            no,
                            format!(
                                "{conn}: the real engine sent nothing within {recorded}s, the stand-in closed the connection"
                            ),
                        ),
                    }
                }
            }
        }
    }

    /// Waits until `function_id` is routable in `namespace` on the stand-in:
    /// the real engine routed this call, so the stand-in must be in the same
    /// state before it is sent. Only the naming grace may make that take long.
    async fn await_routable(&mut self, no: usize, namespace: &str, function_id: &str) {
        let start = Instant::now();
        let engine = self.engine;
        let visible = code_runner_conformance::standin::wait::until(GRACE_DEADLINE, || async {
            engine
                .function_ids(namespace)
                .iter()
                .any(|f| f == function_id)
        })
        .await;
        let waited = start.elapsed();
        if !visible {
            self.fail(
                no,
                format!(
                    "{function_id} never became routable in {namespace} within {GRACE_DEADLINE:?}; \
                     the real engine routed this call"
                ),
            );
        } else if waited > ROUTABLE_AT_ONCE {
            if self.section.contains("grace") {
                self.note(
                    no,
                    &format!(
                        "WAIT {function_id} became routable after {waited:?} (the naming grace, {NAME_GRACE:?})"
                    ),
                );
            } else {
                self.fail(
                    no,
                    format!(
                        "{function_id} took {waited:?} to become routable; the real engine had it at once"
                    ),
                );
            }
        }
    }

    /// Frames the stand-in sent that the recording never read (the recorder
    /// did not read every socket to the end): shown, not compared.
    async fn leftovers(&mut self) {
        let mut shown = Vec::new();
        for (label, conn) in self.conns.iter_mut() {
            self.seq += 1;
            conn.sync(self.seq, label).await;
            while let Some(text) = conn.queue.pop_front() {
                shown.push(format!("{label}<- {text}"));
            }
        }
        for s in shown {
            println!(
                "{} [end] not compared (the recording read no further on this connection): {s}",
                self.name
            );
        }
    }
}

async fn replay(name: &str) {
    let text = read_transcript(name);
    let lines = parse_transcript(name, &text);
    let engine = StandInEngine::start(0).await.expect("the stand-in starts");
    let mut r = Replay {
        name,
        engine: &engine,
        conns: BTreeMap::new(),
        ids: Ids::default(),
        skipped: HashSet::new(),
        section: "start".to_string(),
        seq: 0,
        failures: Vec::new(),
        compared: 0,
        notes: 0,
    };
    r.run(&lines).await;
    r.leftovers().await;
    println!(
        "{name}: {} frames compared, {} skipped or filtered (printed above)",
        r.compared, r.notes
    );
    let failures = std::mem::take(&mut r.failures);
    drop(r);
    engine.shutdown().await;
    assert!(
        failures.is_empty(),
        "the stand-in differs from the real engine ({} frame(s)):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_01_basics() {
    replay("01-basics.log").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_02_conflicts_disconnect_triggers() {
    replay("02-conflicts-disconnect-triggers.log").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_03_configuration_info_ping() {
    replay("03-configuration-info-ping.log").await;
}

/// A transcript added to the spec must be replayed here too.
#[test]
fn every_transcript_is_replayed() {
    let dir = transcripts_dir();
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {} ({e})", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "01-basics.log",
            "02-conflicts-disconnect-triggers.log",
            "03-configuration-info-ping.log"
        ],
        "add a replay test for each new transcript"
    );
}

// ---- the comparison itself ----

fn diffs_of(real: &str, stand_in: &str, ids: &mut Ids) -> Vec<String> {
    let mut diffs = Vec::new();
    compare(
        &parse(real).unwrap(),
        &parse(stand_in).unwrap(),
        "$",
        ids,
        &mut diffs,
    );
    diffs
}

#[test]
fn key_order_is_part_of_the_comparison() {
    let mut ids = Ids::default();
    assert!(diffs_of(
        r#"{"a":1,"b":{"c":1,"d":2}}"#,
        r#"{"a":1,"b":{"c":1,"d":2}}"#,
        &mut ids
    )
    .is_empty());
    let diffs = diffs_of(
        r#"{"a":1,"b":{"c":1,"d":2}}"#,
        r#"{"a":1,"b":{"d":2,"c":1}}"#,
        &mut ids,
    );
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].starts_with("$.b: keys"), "{diffs:?}");
}

#[test]
fn ids_are_masked_consistently() {
    let w1 = "c0823410-ece2-4ff5-ab6d-925551e30c5d";
    let w2 = "09252d01-ded1-4716-84c1-f55712486270";
    let s1 = "11111111-1111-4111-8111-111111111111";
    let s2 = "22222222-2222-4222-8222-222222222222";
    let mut ids = Ids::default();
    // The same real id must stay the same stand-in id…
    assert!(diffs_of(
        &format!(r#"{{"worker_id":"{w1}"}}"#),
        &format!(r#"{{"worker_id":"{s1}"}}"#),
        &mut ids
    )
    .is_empty());
    assert!(diffs_of(
        &format!(r#"{{"data":{{"_caller_worker_id":"{w1}"}}}}"#),
        &format!(r#"{{"data":{{"_caller_worker_id":"{s2}"}}}}"#),
        &mut ids
    )
    .iter()
    .any(|d| d.contains("elsewhere")));
    // …and two real ids cannot share one.
    assert!(diffs_of(
        &format!(r#"{{"owner_worker_id":"{w2}"}}"#),
        &format!(r#"{{"owner_worker_id":"{s1}"}}"#),
        &mut ids
    )
    .iter()
    .any(|d| d.contains("elsewhere")));
    // Client frames carry the stand-in's ids; a client's own ids go unchanged.
    let sent = ids.outgoing(&parse(&format!(r#"{{"x":"{w1}","y":"{w2}"}}"#)).unwrap());
    assert_eq!(sent.compact(), format!(r#"{{"x":"{s1}","y":"{w2}"}}"#));
}

#[test]
fn absent_workers_are_filtered_with_a_reason() {
    let mut frame = parse(
        r#"{"type":"invocationresult","invocation_id":"i","function_id":"engine::functions::list","result":{"functions":[
            {"function_id":"configuration::get","worker_name":"configuration"},
            {"function_id":"demo::echo","worker_name":"w"}]}}"#,
    )
    .unwrap();
    let notes = drop_absent_rows(&mut frame);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        frame.get("result").unwrap().compact(),
        r#"{"functions":[{"function_id":"demo::echo","worker_name":"w"}]}"#
    );
}

#[test]
fn unknown_transcript_lines_are_refused() {
    let refused = std::panic::catch_unwind(|| parse_transcript("t", "A<- {}\nsomething else\n"));
    assert!(refused.is_err());
    let lines = parse_transcript(
        "t",
        "T 1s\nLATENCY {}\n== s\nA (no frame within 1.5s)\nA closed: code=1006\n",
    );
    assert_eq!(lines.len(), 3);
}
