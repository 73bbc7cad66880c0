//! A run's `output` stream (issue 44), through the whole worker on the
//! hermetic stack:
//!
//! - `stream/first_frame_ms/<lang>/p50`, `…/p99`: from the code's first
//!   write (the wall-clock time it prints) to its frame at the caller's
//!   reader, one-shot runs (limit for the p50: 100 ms);
//! - `stream/kept_1mib/<lang>`: a kept run that prints 1 MiB, streamed
//!   over the same run without `output`, paired (limit 1.2).
//!
//! On the hermetic stack a process spawn is the double's exec; the ratio
//! that matters is a real VM's, so with the live engine set
//! (`SANDBOX_CODE_RUNNER_BENCH_ENGINE`) the group runs there, with a
//! worker of its own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use iii_sdk::IIIClient;
use sandbox_code_runner::ids::Lang;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;

use super::prestart::{paired_ratio, Side};
use super::Target;
use super::*;

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// A channel being read: its writer ref, and when its first data frame
/// came (wall clock, ms) with that frame's text.
struct Reader {
    writer: Value,
    first: Arc<Mutex<Option<(f64, String)>>>,
    ended: Arc<Notify>,
    _task: tokio::task::JoinHandle<()>,
}

/// A new channel whose reader is connected before this returns: the SDK's
/// reader connects on its first read, which would put the caller's own
/// handshake inside the run it times.
async fn reader(client: &IIIClient, engine: &str) -> Reader {
    let channel = iii_sdk::helpers::create_channel(client, None)
        .await
        .expect("a channel");
    let writer = serde_json::to_value(&channel.writer_ref).expect("a ref");
    let r = &channel.reader_ref;
    let url = format!(
        "{}/ws/channels/{}?key={}&dir=read",
        engine.trim_end_matches('/'),
        r.channel_id,
        percent_encoded(&r.access_key)
    );
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the reader connects");
    let first = Arc::new(Mutex::new(None));
    let ended = Arc::new(Notify::new());
    let (f, e) = (first.clone(), ended.clone());
    let task = tokio::spawn(async move {
        let (_, mut rx) = ws.split();
        while let Some(Ok(msg)) = rx.next().await {
            let Message::Text(text) = msg else { continue };
            let frame: Value = serde_json::from_str(&text).unwrap_or_default();
            if frame["type"] == "end" {
                e.notify_one();
            } else if frame["type"] == "stdout" {
                let mut first = f.lock().unwrap();
                if first.is_none() {
                    *first = Some((now_ms(), frame["data"].as_str().unwrap_or("").to_string()));
                }
            }
        }
    });
    Reader {
        writer,
        first,
        ended,
        _task: task,
    }
}

/// `s` as a URL query value.
fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn first_write(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "import time\nprint(time.time_ns() // 1000)\ntime.sleep(0.3)\n",
        Lang::Node => {
            "console.log(String(Math.round((performance.timeOrigin + performance.now()) * 1000)));\nawait new Promise((r) => setTimeout(r, 300));\n"
        }
    }
}

/// Where the group runs: a hermetic stack of its own, or the live engine
/// with a worker of its own on it.
enum Place {
    Hermetic(Box<Side>),
    Live {
        url: String,
        client: IIIClient,
        worker: Box<Worker>,
    },
}

/// The mode both places' workers run in (with one VM waiting): the shipped
/// defaults.
const CONFIG_MODE: &str = "prestart: true\n";

impl Place {
    async fn start(target: &Target, client: &IIIClient) -> Place {
        match target {
            Target::Hermetic(_) => Place::Hermetic(Box::new(Side::start(CONFIG_MODE).await)),
            Target::Live(url) => Place::Live {
                url: url.clone(),
                client: client.clone(),
                worker: Box::new(
                    Worker::spawn(url, client, &format!("warm_pool: 1\n{CONFIG_MODE}")).await,
                ),
            },
        }
    }

    fn client(&self) -> &IIIClient {
        match self {
            Place::Hermetic(side) => &side.client,
            Place::Live { client, .. } => client,
        }
    }

    /// The engine's URL, where a channel's reader connects.
    fn url(&self) -> String {
        match self {
            Place::Hermetic(side) => side.stack.url(),
            Place::Live { url, .. } => url.clone(),
        }
    }

    async fn stop(self) {
        match self {
            Place::Hermetic(side) => side.stop().await,
            Place::Live { worker, .. } => worker.stop().await,
        }
    }
}

/// One streamed one-shot run: ms from its first write to its frame.
async fn first_frame_ms(place: &Place, lang: Lang) -> f64 {
    let r = reader(place.client(), &place.url()).await;
    must(
        place.client(),
        "sandbox-code-runner::run",
        json!({"lang": lang.as_str(), "code": first_write(lang), "output": r.writer}),
    )
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(10), r.ended.notified()).await;
    let first = r.first.lock().unwrap().clone();
    let (at, text) = first.expect("a first frame");
    let written_us: f64 = text.trim().parse().expect("the code printed its time");
    at - written_us / 1e3
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

fn one_mib(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(1024):\n    sys.stdout.write(line)\n",
        Lang::Node => "const line = 'x'.repeat(1023) + '\\n';\nfor (let i = 0; i < 1024; i++) process.stdout.write(line);\n",
    }
}

/// The `stream` group.
pub fn stream(rt: &tokio::runtime::Runtime, target: &Target, client: &IIIClient) {
    rt.block_on(async {
        let place = Place::start(target, client).await;
        for lang in [Lang::Python, Lang::Node] {
            if !lang_enabled(lang.as_str()) {
                continue;
            }
            // Untimed: the pool and the interpreters warm.
            for _ in 0..3 {
                first_frame_ms(&place, lang).await;
            }
            let mut v = Vec::new();
            for _ in 0..pairs(20) {
                v.push(first_frame_ms(&place, lang).await);
            }
            let id = format!("stream/first_frame_ms/{}", lang.as_str());
            record_bounded(&format!("{id}/p50"), percentile(v.clone(), 0.5), 100.0);
            record_figure(&format!("{id}/p99"), percentile(v, 0.99));

            let kept = must(
                place.client(),
                "sandbox-code-runner::run",
                json!({"lang": lang.as_str(), "code": "1", "keep": true}),
            )
            .await;
            let rt_id = kept["runtime_id"].clone();
            let code = one_mib(lang);
            let run = |output: Option<Value>| {
                let (client, rt_id) = (place.client(), rt_id.clone());
                async move {
                    let mut payload = json!({"runtime_id": rt_id, "code": code});
                    if let Some(o) = output {
                        payload["output"] = o;
                    }
                    let t = std::time::Instant::now();
                    must(client, "sandbox-code-runner::run", payload).await;
                    t.elapsed().as_secs_f64() * 1e3
                }
            };
            paired_ratio(
                &format!("stream/kept_1mib/{}", lang.as_str()),
                1.2,
                pairs(20),
                || async {
                    let r = reader(place.client(), &place.url()).await;
                    let ms = run(Some(r.writer.clone())).await;
                    let _ = tokio::time::timeout(Duration::from_secs(10), r.ended.notified()).await;
                    ms
                },
                || run(None),
            )
            .await;
            must(
                place.client(),
                "sandbox-code-runner::teardown",
                json!({"runtime_id": rt_id}),
            )
            .await;
        }
        place.stop().await;
    });
}
