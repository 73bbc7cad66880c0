//! Pre-started interpreters against today's path (issue 22): two identical
//! hermetic stacks side by side, one worker with the shipped defaults
//! (pre-started interpreters; a one-shot answers once its VM is gone) and
//! one on today's path (`prestart: false`, `oneshot_stop: stop_confirmed`),
//! the same call made on each, alternated round by round in both orders. Each figure is p50(prestarted) / p50(today's) over
//! the same rounds, with a 95% bootstrap interval (rounds resampled in
//! pairs), recorded in the summary's `ratios`. Also: the memory a waiting
//! interpreter holds (python and node, SDK module loaded), and the 64-caller
//! fan-in on one function with and without.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use code_runner_conformance::standin::client;
use code_runner_conformance::standin::stack::{ListenerLayout, Stack};
use iii_sdk::runtime::FunctionRef;
use iii_sdk::{IIIClient, RegisterFunction};
use sandbox_code_runner::ids::Lang;
use serde_json::{json, Value};

use super::*;

/// The function the `iii` figures call: a bench-side SDK client's echo, so
/// that what is timed is the caller's side.
const PONG: &str = "bench-pre::pong";
/// Alternated rounds per ratio (`SCR_BENCH_PAIRS` overrides).
const ROUNDS: usize = 60;

/// One paired ratio, for the summary's `ratios`.
pub struct PairedRatio {
    pub id: String,
    pub with_p50: f64,
    pub without_p50: f64,
    pub ratio: f64,
    pub ci95: (f64, f64),
    pub rounds: usize,
    pub limit: f64,
}

impl PairedRatio {
    pub fn json(&self) -> Value {
        json!({"name": self.id, "paired": true, "rounds": self.rounds,
               "numerator_p50_ms": self.with_p50, "denominator_p50_ms": self.without_p50,
               "ratio": self.ratio, "ratio_ci95": [self.ci95.0, self.ci95.1],
               "limit": self.limit, "ok": self.ratio <= self.limit})
    }

    pub fn line(&self) -> String {
        format!(
            "{}: {:.2} ms / {:.2} ms = {:.3} (95% {:.3}..{:.3}, {} rounds; limit {}) {}",
            self.id,
            self.with_p50,
            self.without_p50,
            self.ratio,
            self.ci95.0,
            self.ci95.1,
            self.rounds,
            self.limit,
            if self.ratio <= self.limit {
                "ok"
            } else {
                "OVER"
            }
        )
    }
}

/// Paired ratios by id, in the order taken.
pub static PAIRED_RATIOS: Mutex<Vec<PairedRatio>> = Mutex::new(Vec::new());

/// p50(a) / p50(b) over 1,000 resamples of the rounds (each round keeps its
/// pair): the 2.5th and 97.5th percentiles.
fn bootstrap_ratio(a: &[f64], b: &[f64]) -> (f64, f64) {
    let n = a.len();
    let mut rs: Vec<f64> = (0..1000)
        .map(|_| {
            let picks: Vec<usize> = (0..n).map(|_| rand::random::<u32>() as usize % n).collect();
            p50(picks.iter().map(|&i| a[i]).collect()) / p50(picks.iter().map(|&i| b[i]).collect())
        })
        .collect();
    rs.sort_by(|x, y| x.total_cmp(y));
    (rs[25], rs[974])
}

/// Times `with` and `without` alternately, `n` rounds, both orders in turn
/// (each side returns the ms it measured itself).
pub(super) async fn paired_ratio<A, FA, B, FB>(id: &str, limit: f64, n: usize, with: A, without: B)
where
    A: FnMut() -> FA,
    FA: std::future::Future<Output = f64>,
    B: FnMut() -> FB,
    FB: std::future::Future<Output = f64>,
{
    let (a, b) = floor::alternate(n, with, without).await;
    let (with_p50, without_p50) = (p50(a.clone()), p50(b.clone()));
    let r = PairedRatio {
        id: id.to_string(),
        with_p50,
        without_p50,
        ratio: with_p50 / without_p50,
        ci95: bootstrap_ratio(&a, &b),
        rounds: n,
        limit,
    };
    eprintln!("{}", r.line());
    PAIRED_RATIOS.lock().unwrap().push(r);
}

/// One stack with its worker (`prestart` on or off) and the echo.
pub(super) struct Side {
    pub(super) stack: Stack,
    pub(super) client: IIIClient,
    pong: FunctionRef,
    worker: Worker,
}

/// Today's path: every call starts its interpreter, and a one-shot answers
/// once the daemon has confirmed its VM's stop (no lifeline).
const TODAY: &str = "prestart: false\noneshot_stop: stop_confirmed\n";
/// The design: pre-started interpreters, and one-shots that answer once
/// their VM is gone (the shipped defaults).
const PRESTARTED: &str = "prestart: true\n";
/// Cold interpreters, but one-shots that answer once their VM is gone: the
/// share of the one-shot figure that pre-starting alone buys.
const COLD_SAME_STOP: &str = "prestart: false\n";

impl Side {
    pub(super) async fn start(mode: &str) -> Side {
        let layout = ListenerLayout::guarded("sandbox-code-runner", 0, false);
        let stack = Stack::start_with_layout(hermetic_options(), layout)
            .await
            .expect("a prestart bench stack starts");
        let client = client::connect(&stack.url(), "bench-prestart")
            .await
            .expect("bench client connects");
        let pong = client.register_function(
            PONG,
            RegisterFunction::new_async(|input: Value| async move {
                Ok::<Value, iii_sdk::Error>(input)
            }),
        );
        assert!(client::wait_routable(&client, PONG, Duration::from_secs(30)).await);
        let config = format!("warm_pool: 1\n{mode}");
        let worker = Worker::spawn_on(&stack.url(), stack.guest_url(), &client, &config, &[]).await;
        Side {
            stack,
            client,
            pong,
            worker,
        }
    }

    /// One timed call, in ms.
    pub(super) async fn timed(&self, function_id: &str, payload: Value) -> f64 {
        let t = Instant::now();
        must(&self.client, function_id, payload).await;
        t.elapsed().as_secs_f64() * 1e3
    }

    pub(super) async fn stop(self) {
        self.worker.stop().await;
        self.pong.unregister();
        self.client.shutdown_async().await;
        self.stack.shutdown().await;
    }
}

fn handler_source(lang: Lang, uses_iii: bool) -> String {
    match (lang, uses_iii) {
        (Lang::Python, false) => "def handler(payload):\n    return payload\n".into(),
        (Lang::Node, false) => "export function handler(payload) { return payload; }\n".into(),
        (Lang::Python, true) => format!(
            "def handler(payload):\n    return iii.trigger({{'function_id': '{PONG}', 'payload': payload}})\n"
        ),
        (Lang::Node, true) => format!(
            "export async function handler(payload) {{\n  return await iii.trigger({{ function_id: '{PONG}', payload }});\n}}\n"
        ),
    }
}

fn run_code(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "print(2+2)",
        Lang::Node => "console.log(2+2)",
    }
}

/// A waiting interpreter's resident and proportional memory, in MiB: the
/// largest of those found on this host (the double's VMs are host processes).
fn waiting_interpreter_mib(lang: Lang) -> Option<(f64, f64)> {
    let marker = match lang {
        Lang::Python => "pre-started python interpreter",
        Lang::Node => "/tmp/.scr/pre/ready.mjs",
    };
    let mut best: Option<(f64, f64)> = None;
    for pid in code_runner_conformance::standin::host::pids_with(marker) {
        let dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        let kib = |file: &str, key: &str| -> Option<f64> {
            let text = std::fs::read_to_string(dir.join(file)).ok()?;
            let line = text.lines().find(|l| l.starts_with(key))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        let (Some(rss), Some(pss)) = (kib("status", "VmRSS:"), kib("smaps_rollup", "Pss:")) else {
            continue;
        };
        let (rss, pss) = (rss / 1024.0, pss / 1024.0);
        if best.is_none_or(|(r, _)| rss > r) {
            best = Some((rss, pss));
        }
    }
    best
}

/// A run in the kept runtime `rid`, timed.
async fn run_in(side: &Side, rid: &str, lang: Lang) -> f64 {
    let payload = json!({"runtime_id": rid, "code": run_code(lang)});
    side.timed("sandbox-code-runner::run", payload).await
}

/// Waits (untimed) until the pooled python VM's waiting interpreter has
/// loaded all it loads ahead (it wrote `warm` in its directory, which the
/// double keeps on the host): the pool's VM as the design prepares it.
async fn pooled_interpreter_warm(client: &IIIClient) {
    let root = code_runner_conformance::standin::sandbox_double::private_tmpfs::scratch_parent();
    let ok = wait_until(Duration::from_secs(60), || async {
        let Ok(listed) = call(client, "sandbox::list", json!({})).await else {
            return false;
        };
        let python: Vec<String> = listed["sandboxes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["image"] == "python")
            .filter_map(|s| s["sandbox_id"].as_str().map(str::to_string))
            .collect();
        python.iter().any(|id| {
            let pre = root.join(format!("scr-sandbox-{id}/tmp/.scr/pre"));
            std::fs::read_dir(pre)
                .into_iter()
                .flatten()
                .flatten()
                .any(|gen| gen.path().join("warm").exists())
        })
    })
    .await;
    assert!(ok, "the pooled python VM's interpreter gets warm");
}

/// A one-shot python run of `code` from the warm pool, timed; untimed
/// before it, the pool holds a VM again, the last one finished stopping,
/// and (with `warm`) the pooled VM's interpreter is warm.
async fn oneshot(side: &Side, code: &str, warm: bool) -> f64 {
    pool_ready(&side.client, "python", 1).await;
    settled(&side.client, 2).await;
    if warm {
        pooled_interpreter_warm(&side.client).await;
    }
    side.timed(
        "sandbox-code-runner::run",
        json!({"lang": "python", "code": code}),
    )
    .await
}

/// The paired ratio of one-shot runs of `code` on side `a` over side `b`
/// (each with whether to wait for its pooled interpreter to be warm), after
/// three untimed rounds of each.
async fn oneshot_ratio(
    id: &str,
    limit: f64,
    rounds: usize,
    code: &str,
    (a, a_warm): (&Side, bool),
    (b, b_warm): (&Side, bool),
) {
    for _ in 0..3 {
        oneshot(a, code, a_warm).await;
        oneshot(b, code, b_warm).await;
    }
    paired_ratio(
        id,
        limit,
        rounds,
        || oneshot(a, code, a_warm),
        || oneshot(b, code, b_warm),
    )
    .await;
}

/// The `prestart` group.
pub fn prestart(rt: &tokio::runtime::Runtime, target: &Target) {
    if !matches!(target, Target::Hermetic(_)) {
        eprintln!("prestart skipped: it starts two stand-in stacks of its own (hermetic only)");
        return;
    }
    let (with, without) =
        rt.block_on(async { (Side::start(PRESTARTED).await, Side::start(TODAY).await) });
    let n = pairs(ROUNDS);
    for lang in [Lang::Python, Lang::Node] {
        if !lang_enabled(lang.as_str()) {
            continue;
        }
        for (uses_iii, group, limit) in [
            (false, "handler_prestarted", 0.3),
            (true, "handler_prestarted_iii", 0.1),
        ] {
            let fid = format!(
                "bench-pre-{lang}::{}",
                if uses_iii { "iii" } else { "echo" }
            );
            let register = json!({"function_id": fid, "lang": lang.as_str(),
                                  "source": handler_source(lang, uses_iii)});
            rt.block_on(async {
                for side in [&with, &without] {
                    must(
                        &side.client,
                        "sandbox-code-runner::register_function",
                        register.clone(),
                    )
                    .await;
                    // Untimed: the SDK lands in the runtime, the next interpreter waits.
                    side.timed(&fid, json!({"n": 0})).await;
                    side.timed(&fid, json!({"n": 0})).await;
                }
            });
            let payload = json!({"n": 21});
            rt.block_on(paired_ratio(
                &format!("{group}/{lang}"),
                limit,
                n,
                || with.timed(&fid, payload.clone()),
                || without.timed(&fid, payload.clone()),
            ));
        }
        // A run in a kept runtime.
        let rids: Vec<String> = rt.block_on(async {
            let mut ids = Vec::new();
            for side in [&with, &without] {
                let kept = must(
                    &side.client,
                    "sandbox-code-runner::run",
                    json!({"lang": lang.as_str(), "code": run_code(lang), "keep": true}),
                )
                .await;
                ids.push(kept["runtime_id"].as_str().expect("runtime_id").to_string());
            }
            ids
        });
        rt.block_on(async {
            run_in(&with, &rids[0], lang).await;
            run_in(&without, &rids[1], lang).await;
        });
        rt.block_on(paired_ratio(
            &format!("reuse_prestarted/{lang}"),
            0.3,
            n,
            || run_in(&with, &rids[0], lang),
            || run_in(&without, &rids[1], lang),
        ));
        rt.block_on(async {
            for (side, rid) in [(&with, &rids[0]), (&without, &rids[1])] {
                must(
                    &side.client,
                    "sandbox-code-runner::teardown",
                    json!({"runtime_id": rid}),
                )
                .await;
            }
        });
        let memory = waiting_interpreter_mib(lang);
        if let Some((rss, pss)) = memory {
            record_bounded(
                &format!("prestart/waiting_interpreter_rss_mib/{lang}"),
                rss,
                96.0,
            );
            record_figure(&format!("prestart/waiting_interpreter_pss_mib/{lang}"), pss);
        }
    }
    // Only the pools stay: each side's two pooled VMs.
    rt.block_on(async {
        for side in [&with, &without] {
            for lang in [Lang::Python, Lang::Node] {
                call(
                    &side.client,
                    "sandbox-code-runner::teardown",
                    json!({"namespace": format!("bench-pre-{lang}"), "lang": lang.as_str()}),
                )
                .await
                .ok();
            }
        }
    });
    if !lang_enabled("python") {
        rt.block_on(async {
            with.stop().await;
            without.stop().await;
        });
        return;
    }
    // A one-shot python run from the warm pool that uses `iii`: each round
    // waits (untimed) until each side's pool holds a VM again, prepared as
    // that side prepares it (the prestarted side's interpreter warm).
    let code = format!("print(iii.trigger({{'function_id': '{PONG}', 'payload': {{'n': 1}}}}))");
    let rounds = (n / 3).max(10);
    let ratio = |id: &str, limit: f64, a: (&Side, bool), b: (&Side, bool)| {
        rt.block_on(oneshot_ratio(id, limit, rounds, &code, a, b))
    };
    ratio(
        "oneshot_pooled_prestarted_iii/python",
        0.3,
        (&with, true),
        (&without, false),
    );
    // The same, taken as soon as the pool holds the VM again, as a tight
    // loop of one-shots does: the interpreter may still be importing the
    // SDK (~0.3 s of CPU), and the run waits for it.
    ratio(
        "prestart/oneshot_pooled_prestarted_iii_at_refill/python",
        1.0,
        (&with, false),
        (&without, false),
    );
    // Both sides answer with the VM gone, but today's waits for the daemon
    // to confirm the stop (its fixed 200 ms grace), where the design answers
    // once the VM's lifeline shows it ended. What pre-starting alone buys is
    // the same run against a worker that stops like the design but starts
    // its interpreter cold.
    rt.block_on(without.stop());
    let cold = rt.block_on(Side::start(COLD_SAME_STOP));
    ratio(
        "prestart/oneshot_pooled_prestarted_iii_same_stop/python",
        1.0,
        (&with, true),
        (&cold, false),
    );
    rt.block_on(async {
        with.stop().await;
        cold.stop().await;
    });
}
