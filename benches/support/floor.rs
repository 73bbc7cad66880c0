//! The design floor of the per-call overhead, measured in the same run as
//! the overhead itself.
//!
//! Any worker that sits between a caller and `sandbox::*` pays one extra
//! hop: caller → engine → worker → engine and back, through an SDK on both
//! ends. `HopFloor` is that hop and nothing else: an SDK client on the bus
//! whose one function turns a small call into an exec payload prepared in
//! advance and forwards it to `sandbox::exec`. Alternated with the worker
//! and the direct call, its overhead over the direct call is the floor, and
//! the worker's overhead above it is what the worker's own design costs.
//!
//! A back-to-back round trip is not that floor: between two hops of a run
//! the exec leaves every thread of the path idle for tens of milliseconds,
//! and waking an idle CPU costs far more than passing a frame to a busy one
//! (`cargo bench --bench engine_roundtrip`: the same round trip after 0, 2,
//! 10 and 40 ms of idleness).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iii_sdk::protocol::TriggerRequest;
use iii_sdk::runtime::FunctionRef;
use iii_sdk::{IIIClient, RegisterFunction};
use serde_json::{json, Value};

use super::{bootstrap_p50, p50, Target};

/// What the worker may add above the bare forwarder, in ms (p50, the
/// daemon's share out): ~3× its own work between its sandbox calls.
pub const ABOVE_FLOOR_LIMIT_MS: f64 = 0.1;

/// The forwarder's function id.
pub const FORWARD: &str = "bench-floor::forward_exec";

/// A bus client whose one function forwards prepared execs.
pub struct HopFloor {
    client: IIIClient,
    planned: Arc<Mutex<HashMap<String, Value>>>,
    function: FunctionRef,
}

impl HopFloor {
    /// Connects the forwarder and waits until callers can route to it.
    pub async fn connect(url: &str) -> HopFloor {
        let client = code_runner_conformance::standin::client::connect(url, "bench-floor")
            .await
            .expect("the floor forwarder connects");
        let planned: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let (outbound, table) = (client.clone(), planned.clone());
        let function = client.register_function(
            FORWARD,
            RegisterFunction::new_async(move |input: Value| {
                let key = input["key"].as_str().unwrap_or_default().to_string();
                let payload = table.lock().unwrap().get(&key).cloned();
                let outbound = outbound.clone();
                async move {
                    let payload = payload.ok_or_else(|| {
                        iii_sdk::Error::Handler(format!("no exec planned for {key}"))
                    })?;
                    outbound
                        .trigger(TriggerRequest {
                            function_id: "sandbox::exec".into(),
                            payload,
                            action: None,
                            timeout_ms: Some(120_000),
                        })
                        .await
                }
            }),
        );
        let routable = code_runner_conformance::standin::client::wait_routable(
            &client,
            FORWARD,
            Duration::from_secs(30),
        )
        .await;
        assert!(routable, "{FORWARD} is routable");
        HopFloor {
            client,
            planned,
            function,
        }
    }

    /// Prepares the exec that a call with `key` forwards: the same payload
    /// the direct baseline sends.
    pub fn plan(
        &self,
        key: &str,
        sandbox_id: &str,
        params: &sandbox_code_runner::sandbox::ExecParams,
    ) {
        self.planned
            .lock()
            .unwrap()
            .insert(key.to_string(), super::exec_payload(sandbox_id, params));
    }

    pub async fn shutdown(self) {
        self.function.unregister();
        self.client.shutdown_async().await;
    }
}

/// One call through the forwarder, as a caller makes it.
pub async fn through_floor(caller: &IIIClient, key: &str) {
    super::must(caller, FORWARD, json!({ "key": key })).await;
}

/// A p50 and its 95% bootstrap interval, in ms.
#[derive(Clone, Copy)]
pub struct Spread {
    pub p50: f64,
    pub ci: (f64, f64),
}

impl Spread {
    pub(crate) fn of(v: &[f64]) -> Spread {
        Spread {
            p50: p50(v.to_vec()),
            ci: bootstrap_p50(v),
        }
    }

    pub fn json(&self) -> Value {
        json!({"p50_ms": self.p50, "ci95_ms": [self.ci.0, self.ci.1]})
    }
}

/// The paired differences a − b, round by round.
fn diff(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

/// Three overheads from one set of rounds: the worker's over the direct
/// call, the forwarder's over the direct call (the floor), and the worker's
/// over the forwarder.
#[derive(Clone, Copy)]
pub struct Overheads {
    pub worker: Spread,
    pub floor: Spread,
    pub above_floor: Spread,
}

impl Overheads {
    fn of(worker: &[f64], floor: &[f64], direct: &[f64]) -> Overheads {
        Overheads {
            worker: Spread::of(&diff(worker, direct)),
            floor: Spread::of(&diff(floor, direct)),
            above_floor: Spread::of(&diff(worker, floor)),
        }
    }

    fn line(&self) -> String {
        let s = |x: &Spread| format!("{:.3} ms ({:.3}..{:.3})", x.p50, x.ci.0, x.ci.1);
        format!(
            "worker overhead {}, floor {}, worker above the floor {}",
            s(&self.worker),
            s(&self.floor),
            s(&self.above_floor)
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "worker_overhead": self.worker.json(),
            "floor_overhead": self.floor.json(),
            "above_floor": self.above_floor.json(),
        })
    }
}

/// One paired overhead: the worker's and the direct call's p50 wall times,
/// the three overheads from wall times, and, on the hermetic bench, the same
/// with the daemon's share of each call taken out. In ms.
#[derive(Clone, Copy)]
pub struct PairedFigure {
    pub worker_p50: f64,
    pub direct_p50: f64,
    pub wall: Overheads,
    pub daemon_excluded: Option<Overheads>,
}

/// Paired overheads by id, for the summary.
pub static PAIRED: Mutex<std::collections::BTreeMap<String, PairedFigure>> =
    Mutex::new(std::collections::BTreeMap::new());

/// Every order of (worker, floor, direct), taken in turn so that order and
/// drift hit each side alike.
const ORDERS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [2, 0, 1],
    [1, 2, 0],
    [0, 2, 1],
    [1, 0, 2],
    [2, 1, 0],
];

/// Alternates the worker, the forwarder and the direct call `n` times, in
/// every order in turn, so that drift and background noise hit each side
/// alike. Records the p50 of the paired worker − direct differences (with
/// its 95% bootstrap interval) and the floor figures under `PAIRED`. On the
/// hermetic bench each call's time is also taken without the daemon's
/// share (the stand-in engine's time from forwarding its `sandbox::exec`
/// to the answer): the exec's own jitter, which is most of the spread of
/// the wall-time differences, drops out and the hops remain.
pub async fn paired_with_floor<A, FA, F, FF, B, FB>(
    target: &Target,
    id: &str,
    n: usize,
    mut worker: A,
    mut floor: F,
    mut direct: B,
) where
    A: FnMut() -> FA,
    FA: std::future::Future<Output = ()>,
    F: FnMut() -> FF,
    FF: std::future::Future<Output = ()>,
    B: FnMut() -> FB,
    FB: std::future::Future<Output = ()>,
{
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut hops: [Vec<f64>; 3] = Default::default();
    for i in 0..n {
        for &side in &ORDERS[i % ORDERS.len()] {
            let t = Instant::now();
            match side {
                0 => worker().await,
                1 => floor().await,
                _ => direct().await,
            }
            let ms = t.elapsed().as_secs_f64() * 1e3;
            wall[side].push(ms);
            if let Some(exec_ms) = target.exec_ms_since(t) {
                hops[side].push(ms - exec_ms);
            }
        }
    }
    let wall_figures = Overheads::of(&wall[0], &wall[1], &wall[2]);
    let daemon_excluded =
        (hops[0].len() == n && n > 0).then(|| Overheads::of(&hops[0], &hops[1], &hops[2]));
    eprintln!("{id}: over {n} rounds: {}", wall_figures.line());
    if let Some(h) = &daemon_excluded {
        eprintln!("{id}: the daemon's share taken out: {}", h.line());
        // What the worker's own design adds to the hop every worker pays:
        // its work between its sandbox calls, request and response.
        super::record_bounded(
            &format!("{id}/worker_above_floor_ms_p50"),
            h.above_floor.p50,
            ABOVE_FLOOR_LIMIT_MS,
        );
    }
    PAIRED.lock().unwrap().insert(
        id.to_string(),
        PairedFigure {
            worker_p50: p50(wall[0].clone()),
            direct_p50: p50(wall[2].clone()),
            wall: wall_figures,
            daemon_excluded,
        },
    );
}

/// One variant of a call against another, alternated round by round (`with`
/// then `without`, then the other way round): each side's p50 and the p50 of
/// the paired with − without differences with its 95% bootstrap interval,
/// in ms. For an extra hop that has no floor or direct call beside it (the
/// guest middleware's, `support::guest_middleware`).
#[derive(Clone)]
pub struct PairedDiff {
    /// What one value of a side is.
    pub measures: String,
    pub with_p50: f64,
    pub without_p50: f64,
    pub difference: Spread,
    pub rounds: usize,
}

impl PairedDiff {
    /// Its line in the bench's output.
    pub fn line(&self, id: &str) -> String {
        let d = &self.difference;
        format!(
            "{id}: over {} rounds: with {:.3} ms, without {:.3} ms, added (paired p50) {:.3} ms ({:.3}..{:.3})",
            self.rounds, self.with_p50, self.without_p50, d.p50, d.ci.0, d.ci.1
        )
    }

    /// Its entry under the summary's `paired_overhead`.
    pub fn json(&self) -> Value {
        let d = &self.difference;
        json!({"measures": self.measures, "rounds": self.rounds,
               "with_p50_ms": self.with_p50, "without_p50_ms": self.without_p50,
               "overhead_p50_ms": d.p50, "overhead_p50_ci95_ms": [d.ci.0, d.ci.1]})
    }
}

/// Two-sided paired figures by id, for the summary (beside [`PAIRED`]).
pub static PAIRED_DIFFS: Mutex<std::collections::BTreeMap<String, PairedDiff>> =
    Mutex::new(std::collections::BTreeMap::new());

/// `n` rounds of `with` and `without`, in both orders in turn, each giving
/// the value it measured itself (ms): the two sides' values, round by round.
pub async fn alternate<A, FA, B, FB>(n: usize, mut with: A, mut without: B) -> (Vec<f64>, Vec<f64>)
where
    A: FnMut() -> FA,
    FA: std::future::Future<Output = f64>,
    B: FnMut() -> FB,
    FB: std::future::Future<Output = f64>,
{
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        if i % 2 == 0 {
            a.push(with().await);
            b.push(without().await);
        } else {
            b.push(without().await);
            a.push(with().await);
        }
    }
    (a, b)
}

/// Alternates `with` and `without` `n` times (see [`alternate`]) and records
/// the [`PairedDiff`] under `id`.
pub async fn paired_diff<A, FA, B, FB>(id: &str, measures: &str, n: usize, with: A, without: B)
where
    A: FnMut() -> FA,
    FA: std::future::Future<Output = f64>,
    B: FnMut() -> FB,
    FB: std::future::Future<Output = f64>,
{
    let (a, b) = alternate(n, with, without).await;
    let figure = PairedDiff {
        measures: measures.to_string(),
        difference: Spread::of(&diff(&a, &b)),
        with_p50: p50(a),
        without_p50: p50(b),
        rounds: n,
    };
    eprintln!("{}", figure.line(id));
    PAIRED_DIFFS.lock().unwrap().insert(id.to_string(), figure);
}
