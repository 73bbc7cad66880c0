//! Where a step's time went, as far as the harness can see: when a step
//! misses its time bound (or its call's deadline, or a case its deadline),
//! the failure lists the `sandbox::*` calls the daemon double served
//! meanwhile — in the order they arrived, each with its offset from the
//! step's start, what it was about, how long it took and how it ended —
//! and how much of the step the daemon was busy. Against a live engine the
//! harness has no double, and the failure says so.

use std::time::{Duration, Instant};

use crate::standin::sandbox_double::call_log::SandboxCall;
use crate::suite::env::Env;

/// How many calls a diagnosis lists before it elides the middle.
const SHOWN: usize = 40;

/// One environment's view of a time window: what ran in it.
pub(crate) struct Window<'a> {
    pub(crate) env: &'a Env,
    pub(crate) from: Instant,
    pub(crate) to: Instant,
    /// How many other cases were running in the environment meanwhile
    /// (their calls are in the record too).
    pub(crate) others: usize,
}

impl Window<'_> {
    /// The lines to add to a timing failure.
    pub(crate) fn explain(&self) -> String {
        let Some(log) = self.env.sandbox_calls() else {
            return format!(
                "\n  where the time went: unknown — against {} the harness has no daemon double, \
                 so it sees none of the worker's sandbox::* calls (run with --hermetic or \
                 --engine-bin to see them)",
                self.env.engine_kind()
            );
        };
        let calls = log.between(self.from, self.to);
        let step = self.to.saturating_duration_since(self.from);
        let mut out = String::new();
        if calls.is_empty() {
            out.push_str(&format!(
                "\n  where the time went: no sandbox::* call reached the daemon double during \
                 these {} ms (on {}): the time went in the worker or the engine, not in the \
                 daemon",
                step.as_millis(),
                self.env.engine_kind()
            ));
        } else {
            out.push_str(&format!(
                "\n  where the time went: the sandbox::* calls the daemon double served \
                 meanwhile (on {}; offsets from the start):",
                self.env.engine_kind()
            ));
            let width = calls.iter().map(|c| c.function.len()).max().unwrap_or(0);
            let lines: Vec<String> = calls.iter().map(|c| self.line(c, width)).collect();
            let shown: Vec<String> = if lines.len() > SHOWN {
                let half = SHOWN / 2;
                let mut v = lines[..half].to_vec();
                v.push(format!("… {} more calls …", lines.len() - SHOWN));
                v.extend_from_slice(&lines[lines.len() - half..]);
                v
            } else {
                lines
            };
            for l in shown {
                out.push_str("\n    ");
                out.push_str(&l);
            }
            out.push_str(&format!(
                "\n  the daemon was busy {} ms of these {} ms",
                busy(&calls, self.from, self.to).as_millis(),
                step.as_millis()
            ));
        }
        if self.others > 0 {
            out.push_str(&format!(
                "; {} other case{} ran in this environment meanwhile, so some of these calls \
                 may be theirs",
                self.others,
                if self.others == 1 { "" } else { "s" }
            ));
        }
        out
    }

    /// `+1.840 s  sandbox::exec  3f2a9c1e python3 -c '…' (exit 0)  43000 ms  ok`
    fn line(&self, c: &SandboxCall, width: usize) -> String {
        let offset = if c.started >= self.from {
            format!("+{:.3} s", (c.started - self.from).as_secs_f64())
        } else {
            format!("-{:.3} s", (self.from - c.started).as_secs_f64())
        };
        let took = match c.took {
            Some(t) => format!("{} ms  {}", t.as_millis(), c.outcome),
            None => format!(
                "still running after {} ms",
                self.to.saturating_duration_since(c.started).as_millis()
            ),
        };
        format!("{offset:>10}  {:<width$}  {}  {took}", c.function, c.note)
    }
}

/// How long at least one of `calls` was in progress between `from` and `to`.
fn busy(calls: &[SandboxCall], from: Instant, to: Instant) -> Duration {
    let mut spans: Vec<(Instant, Instant)> = calls
        .iter()
        .map(|c| {
            let end = c.took.map_or(to, |t| (c.started + t).min(to));
            (c.started.max(from), end)
        })
        .filter(|(s, e)| e > s)
        .collect();
    spans.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for (s, e) in spans {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = current {
        total += ce - cs;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: Instant, ms: Option<u64>) -> SandboxCall {
        SandboxCall {
            function: "sandbox::exec".into(),
            started: start,
            took: ms.map(Duration::from_millis),
            outcome: "ok".into(),
            note: String::new(),
        }
    }

    #[test]
    fn busy_time_is_the_union_of_the_calls_clipped_to_the_window() {
        let from = Instant::now();
        let at = |ms: u64| from + Duration::from_millis(ms);
        let to = at(1000);
        let calls = [
            // Started before the window: only its part inside counts.
            SandboxCall {
                started: from - Duration::from_millis(100),
                ..call(from, Some(200))
            },
            call(at(50), Some(100)), // overlaps the first: 50..150
            call(at(300), Some(100)),
            call(at(900), None), // still running at the end: 900..1000
        ];
        assert_eq!(busy(&calls, from, to), Duration::from_millis(350));
    }
}
