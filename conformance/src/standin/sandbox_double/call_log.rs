//! A read-only record of the calls the double served: which `sandbox::*`
//! function, when it arrived, how long it took and how it ended (`ok` or
//! the S-code it failed with), plus a few words on what it was about (the
//! image, the sandbox, the command and its exit code, the path). The
//! suite reads it to say where a step's time went when the step misses a
//! bound. It is a ring: past [`CAPACITY`] calls the oldest drop out. Nothing
//! in the double reads it back; recording never changes an answer.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::exec::{ExecRequest, ExecResponse};
use super::fs_ops::{MkdirRequest, MkdirResponse, ReadRequest, ReadResponse};
use super::fs_ops::{WriteRequest, WriteResponse};
use super::lifecycle::{CatalogListRequest, CatalogListResponse, CreateRequest, CreateResponse};
use super::lifecycle::{ListRequest, ListResponse, StopRequest, StopResponse};
use super::run::{RunRequest, SandboxRunResponse};

/// How many calls the ring keeps.
pub const CAPACITY: usize = 4096;
/// How much of one command-line argument a note keeps.
const ARG_CHARS: usize = 32;

/// One call the double served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCall {
    /// `sandbox::exec`, …
    pub function: String,
    /// When the call reached the double.
    pub started: Instant,
    /// How long it took; `None` while it has not answered.
    pub took: Option<Duration>,
    /// `ok` (an exec's exit code is in the note), or the S-code of its error;
    /// empty while it has not answered.
    pub outcome: String,
    /// What the call was about: the image, the sandbox (its id's first 8
    /// characters), the command, the path; what a create answered.
    pub note: String,
}

impl SandboxCall {
    /// When it answered, if it did.
    fn ended(&self) -> Option<Instant> {
        self.took.map(|t| self.started + t)
    }
}

/// The ring of calls.
#[derive(Debug, Default)]
pub struct CallLog {
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    next: u64,
    calls: VecDeque<(u64, SandboxCall)>,
}

impl CallLog {
    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call arrived; the number to [`CallLog::end`] it with.
    pub(crate) fn begin(&self, function: &str, note: String) -> u64 {
        let mut ring = self.ring();
        let id = ring.next;
        ring.next += 1;
        if ring.calls.len() == CAPACITY {
            ring.calls.pop_front();
        }
        ring.calls.push_back((
            id,
            SandboxCall {
                function: function.to_string(),
                started: Instant::now(),
                took: None,
                outcome: String::new(),
                note,
            },
        ));
        id
    }

    /// Call `id` answered: `outcome`, and what its answer adds to the note.
    pub(crate) fn end(&self, id: u64, outcome: String, answered: Option<String>) {
        let mut ring = self.ring();
        // Recent calls end first: look from the back.
        if let Some((_, call)) = ring.calls.iter_mut().rev().find(|(i, _)| *i == id) {
            call.took = Some(call.started.elapsed());
            call.outcome = outcome;
            if let Some(a) = answered {
                call.note = if call.note.is_empty() {
                    a
                } else {
                    format!("{} {a}", call.note)
                };
            }
        }
    }

    /// Every call that was in progress at some point between `from` and
    /// `to` (it arrived before `to` and had not answered by `from`), in the
    /// order they arrived.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<SandboxCall> {
        self.ring()
            .calls
            .iter()
            .map(|(_, c)| c)
            .filter(|c| c.started <= to && c.ended().is_none_or(|e| e >= from))
            .cloned()
            .collect()
    }
}

/// What a request or an answer says about a call, for its note.
pub(crate) trait Noted {
    fn note(&self) -> Option<String> {
        None
    }
}

/// A sandbox id as notes show it: its first 8 characters.
fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

/// One argument of a command line, first line only and cut to
/// [`ARG_CHARS`] characters.
fn arg(a: &str) -> String {
    let line = a.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(ARG_CHARS).collect();
    if out.len() < a.len() {
        out.push('…');
    }
    if out.contains(' ') || out.is_empty() {
        format!("'{out}'")
    } else {
        out
    }
}

impl Noted for CreateRequest {
    fn note(&self) -> Option<String> {
        Some(if self.network == Some(true) {
            format!("{} (network)", self.image)
        } else {
            self.image.clone()
        })
    }
}

impl Noted for CreateResponse {
    fn note(&self) -> Option<String> {
        Some(format!("→ {}", short(&self.sandbox_id)))
    }
}

impl Noted for ExecRequest {
    fn note(&self) -> Option<String> {
        let words: Vec<String> = if self.argv.is_empty() {
            std::iter::once(self.cmd.as_str())
                .chain(self.args.iter().map(String::as_str))
                .map(arg)
                .collect()
        } else {
            self.argv.iter().map(|a| arg(a)).collect()
        };
        Some(format!("{} {}", short(&self.sandbox_id), words.join(" ")))
    }
}

impl Noted for ExecResponse {
    fn note(&self) -> Option<String> {
        self.exit_code.map(|c| format!("(exit {c})"))
    }
}

impl Noted for RunRequest {
    fn note(&self) -> Option<String> {
        Some(format!("{} {}", self.image, self.lang))
    }
}

impl Noted for SandboxRunResponse {
    fn note(&self) -> Option<String> {
        self.exit_code.map(|c| format!("(exit {c})"))
    }
}

impl Noted for StopRequest {
    fn note(&self) -> Option<String> {
        Some(short(&self.sandbox_id))
    }
}

impl Noted for WriteRequest {
    fn note(&self) -> Option<String> {
        Some(format!("{} {}", short(&self.sandbox_id), self.path))
    }
}

impl Noted for ReadRequest {
    fn note(&self) -> Option<String> {
        Some(format!("{} {}", short(&self.sandbox_id), self.path))
    }
}

impl Noted for MkdirRequest {
    fn note(&self) -> Option<String> {
        Some(format!("{} {}", short(&self.sandbox_id), self.path))
    }
}

impl Noted for StopResponse {}
impl Noted for ListRequest {}
impl Noted for ListResponse {}
impl Noted for CatalogListRequest {}
impl Noted for CatalogListResponse {}
impl Noted for WriteResponse {}
impl Noted for ReadResponse {}
impl Noted for MkdirResponse {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_overlapping_a_window_are_listed_in_arrival_order_and_open_ones_too() {
        let log = CallLog::default();
        let before = log.begin("sandbox::create", "python".into());
        log.end(before, "ok".into(), Some("→ 3f2a9c1e".into()));
        let from = Instant::now();
        let exec = log.begin("sandbox::exec", "3f2a9c1e python3".into());
        log.end(exec, "ok".into(), Some("(exit 0)".into()));
        let open = log.begin("sandbox::stop", "3f2a9c1e".into());
        let to = Instant::now();
        let seen = log.between(from, to);
        let names: Vec<&str> = seen.iter().map(|c| c.function.as_str()).collect();
        assert_eq!(names, ["sandbox::exec", "sandbox::stop"]);
        assert!(seen[0].took.is_some() && seen[0].note.ends_with("(exit 0)"));
        assert!(seen[1].took.is_none(), "still open: {:?}", seen[1]);
        log.end(open, "ok".into(), None);
        let all = log.between(Instant::now() - Duration::from_secs(60), Instant::now());
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].note, "python → 3f2a9c1e");
    }

    #[test]
    fn the_ring_keeps_the_latest_calls() {
        let log = CallLog::default();
        let from = Instant::now();
        for i in 0..CAPACITY + 10 {
            let id = log.begin("sandbox::list", format!("{i}"));
            log.end(id, "ok".into(), None);
        }
        let seen = log.between(from, Instant::now());
        assert_eq!(seen.len(), CAPACITY);
        assert_eq!(seen[0].note, "10");
    }

    #[test]
    fn long_arguments_are_cut_to_their_first_line() {
        assert_eq!(arg("python3"), "python3");
        assert_eq!(arg("-c"), "-c");
        let cut = arg("# sandbox-code-runner: the prelude of both wrappers\nimport os");
        assert!(cut.starts_with("'# sandbox-code-runner: the prel") && cut.ends_with("…'"));
    }
}
