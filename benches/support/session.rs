//! Sessions (issue 34): a run into a session after a first one, against a
//! run into a plain kept runtime, on one worker (pre-started interpreters,
//! the default), paired and alternated round by round; and the memory an
//! idle session's interpreter holds.
//!
//! - `session_run/<lang>`: p50(run into a session) / p50(run into a plain
//!   kept runtime), in the summary's `ratios`;
//! - `session/idle_interpreter_pss_mib/<lang>`: the session interpreter's
//!   proportional memory once its runs are done (a bounded figure).

use code_runner_conformance::standin::host::pids_with;
use sandbox_code_runner::ids::Lang;
use serde_json::{json, Value};

use super::prestart::{paired_ratio, Side};
use super::*;

const ROUNDS: usize = 60;
/// A turn drops to the guest user before it talks to the interpreter: a
/// `chown` of the exec's pipes and a `setpriv`, ~1 ms each here, and its
/// watchdog ~1 ms, against a pre-started relay's shell builtins. Twice a
/// plain kept run's time at most.
const RATIO_LIMIT: f64 = 2.0;
/// The daemon's default `memory_mb` is 512; an idle session should hold a
/// small part of it.
const IDLE_LIMIT_MIB: f64 = 64.0;

fn code(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "print(2+2)",
        Lang::Node => "console.log(2+2)",
    }
}

/// The marker a session interpreter's argv carries (its harness).
fn marker(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "a session's python interpreter",
        Lang::Node => "a session's node interpreter",
    }
}

async fn keep(side: &Side, lang: Lang, session: bool) -> String {
    let v: Value = must(
        &side.client,
        "sandbox-code-runner::run",
        json!({"lang": lang.as_str(), "code": code(lang), "keep": true, "session": session}),
    )
    .await;
    v["runtime_id"]
        .as_str()
        .expect("a kept run's id")
        .to_string()
}

fn pss_mib(pid: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// The `session` group.
pub fn session(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let side = Side::start("prestart: true\n").await;
        for lang in [Lang::Python, Lang::Node] {
            if !lang_enabled(lang.as_str()) {
                continue;
            }
            let in_session = keep(&side, lang, true).await;
            let plain = keep(&side, lang, false).await;
            let run = |id: String| {
                let side = &side;
                async move {
                    side.timed(
                        "sandbox-code-runner::run",
                        json!({"runtime_id": id, "code": code(lang)}),
                    )
                    .await
                }
            };
            // Untimed: each has served a run since it was kept.
            run(in_session.clone()).await;
            run(plain.clone()).await;
            paired_ratio(
                &format!("session_run/{}", lang.as_str()),
                RATIO_LIMIT,
                pairs(ROUNDS),
                || run(in_session.clone()),
                || run(plain.clone()),
            )
            .await;
            let idle = pids_with(marker(lang))
                .iter()
                .filter_map(|pid| pss_mib(pid))
                .fold(0.0, f64::max);
            record_bounded(
                &format!("session/idle_interpreter_pss_mib/{}", lang.as_str()),
                idle,
                IDLE_LIMIT_MIB,
            );
            for id in [in_session, plain] {
                must(
                    &side.client,
                    "sandbox-code-runner::teardown",
                    json!({ "runtime_id": id }),
                )
                .await;
            }
        }
        side.stop().await;
    });
}
