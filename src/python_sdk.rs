//! The python guest SDK, pip-installed once per worker instead of once per VM.
//!
//! The first python VM that needs `iii` pip-installs it into its private
//! `/tmp/.iii-py` (as before). If that VM has run no tenant code yet, the
//! worker then packs the installed tree into one gzip tar inside it, reads it
//! out in slices that stay under the daemon's 1 MiB stdout cut, checks it
//! against the SHA-256 the VM reported, and keeps it in memory under the
//! interpreter key the VM measured (implementation, version, ABI, platform,
//! libc). Later VMs get the archive planted under `/tmp` as base64 text
//! chunks (`sandbox::fs::write`) and one exec that unpacks it only when the
//! VM's own key and the digest of the joined bytes both match; otherwise the
//! VM falls back to pip. Nothing is planted in the image's shared rootfs.
//!
//! Memory is bounded: at most [`MAX_ARCHIVES`] archives of at most
//! [`MAX_ARCHIVE_BYTES`] each (the 0.25.0 tree packs to ~6.4 MB).
//!
//! This module is the worker-wide cache and its counters; what the manager
//! does in one VM (pip, pack, plant, unpack) is `runtime/python_sdk.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::guest;
use crate::sandbox::ExecOutput;

/// Archives kept at once (one per interpreter key; the oldest goes first).
pub(crate) const MAX_ARCHIVES: usize = 2;
/// Largest archive the worker keeps (raw bytes).
pub(crate) const MAX_ARCHIVE_BYTES: usize = 32 << 20;
/// Raw bytes per read exec and per planted chunk: a multiple of 3, so the
/// base64 slices join without padding, and 960 KiB as base64, under the
/// stream cap (asserted below).
pub(crate) const SLICE: usize = 720 * 1024;
const _: () = assert!(SLICE % 3 == 0 && SLICE / 3 * 4 < guest::DAEMON_STREAM_CAP);
/// Planted chunks written at once: as many calls as the daemon runs in
/// one sandbox.
pub(crate) const PARALLEL_WRITES: usize = crate::daemon_limits::DAEMON.max_execs_per_sandbox.value;
pub(crate) const ARCHIVE_PATH: &str = "/tmp/.scr/sdk.tgz";
pub(crate) const CHUNK_DIR: &str = "/tmp/.scr/sdk-chunks";

/// The exit codes of `sdk_archive.py unpack`.
pub(crate) const UNPACK_KEY_DIFFERS: i32 = 10;

/// One installed SDK tree, packed.
pub(crate) struct Archive {
    /// The interpreter key measured inside the VM that installed it.
    pub(crate) key: String,
    pub(crate) sha256: String,
    pub(crate) size: usize,
    /// The archive as base64 text, ready to plant: whole through a data
    /// channel, or in [`Archive::chunks`] inline.
    pub(crate) text: Arc<str>,
}

impl Archive {
    /// The text in pieces of [`SLICE`] raw bytes each (base64 is ASCII, so
    /// every cut is a char boundary), for a bus without data channels.
    pub(crate) fn chunks(&self) -> Vec<&str> {
        let piece = SLICE / 3 * 4;
        (0..self.text.len())
            .step_by(piece)
            .map(|at| &self.text[at..(at + piece).min(self.text.len())])
            .collect()
    }
}

/// What the python SDK work cost, worker-wide.
#[derive(Debug, Default)]
pub struct SdkCounters {
    pub pip_installs: AtomicU64,
    pub pip_failures: AtomicU64,
    pub pip_nanos: AtomicU64,
    pub plants: AtomicU64,
    pub plant_nanos: AtomicU64,
    pub plant_failures: AtomicU64,
    pub key_mismatches: AtomicU64,
    pub captures: AtomicU64,
    pub capture_nanos: AtomicU64,
    pub capture_failures: AtomicU64,
}

/// Pooled python VMs get the archive planted only while tenants' python
/// runs use `iii`: once none has for this long, a refill stays bare and
/// costs no plant (a worker whose tenants never name `iii` never plants).
pub(crate) const PREPLANT_WINDOW: Duration = Duration::from_secs(600);

/// The archives, and the gate that makes a cold worker pip-install once
/// rather than once per concurrent VM.
#[derive(Default)]
pub struct PySdkCache {
    /// Newest first.
    archives: Mutex<VecDeque<Arc<Archive>>>,
    /// Held by the VM that pip-installs for the worker.
    pub(crate) fill: tokio::sync::Mutex<()>,
    pub(crate) counters: SdkCounters,
    /// When a python run last wanted `iii`.
    wanted_at: Mutex<Option<Instant>>,
}

pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl PySdkCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Archive>>> {
        self.archives.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A python run wants `iii`: pooled VMs are planted for a while.
    pub(crate) fn note_wanted(&self) {
        *self.wanted_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether a pooled python VM should get the archive at `now`.
    pub(crate) fn preplant_due(&self, now: Instant) -> bool {
        let wanted = *self.wanted_at.lock().unwrap_or_else(|p| p.into_inner());
        wanted.is_some_and(|t| now.duration_since(t) < PREPLANT_WINDOW) && self.newest().is_some()
    }

    /// The archive most recently captured.
    pub(crate) fn newest(&self) -> Option<Arc<Archive>> {
        self.lock().front().cloned()
    }

    /// The archive made for one interpreter key.
    pub(crate) fn by_key(&self, key: &str) -> Option<Arc<Archive>> {
        self.lock().iter().find(|a| a.key == key).cloned()
    }

    /// Keeps `a`, newest first, within [`MAX_ARCHIVES`].
    pub(crate) fn insert(&self, a: Archive) {
        let mut list = self.lock();
        list.retain(|old| old.key != a.key);
        list.push_front(Arc::new(a));
        list.truncate(MAX_ARCHIVES);
    }

    /// `{archives, archive_bytes, pip_installs, …}` for the stats function.
    pub fn to_json(&self) -> Value {
        let (n, bytes) = {
            let list = self.lock();
            (list.len(), list.iter().map(|a| a.size as u64).sum::<u64>())
        };
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "archives": n,
            "archive_bytes": bytes,
            "pip_installs": get(&c.pip_installs),
            "pip_failures": get(&c.pip_failures),
            "pip_ns": get(&c.pip_nanos),
            "plants": get(&c.plants),
            "plant_ns": get(&c.plant_nanos),
            "plant_failures": get(&c.plant_failures),
            "key_mismatches": get(&c.key_mismatches),
            "captures": get(&c.captures),
            "capture_ns": get(&c.capture_nanos),
            "capture_failures": get(&c.capture_failures),
        })
    }
}

pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `{"key","size","sha256"}` from a successful pack.
pub(crate) fn parse_packed(out: &ExecOutput) -> Option<(String, usize, String)> {
    if out.exit_code != Some(0) {
        return None;
    }
    let v: Value = serde_json::from_str(out.stdout.trim()).ok()?;
    let key = v.get("key")?.as_str()?.to_string();
    let size = usize::try_from(v.get("size")?.as_u64()?).ok()?;
    let sha = v.get("sha256")?.as_str()?.to_string();
    let hex_ok = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_ok && !key.is_empty()).then_some((key, size, sha.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(key: &str) -> Archive {
        Archive {
            key: key.into(),
            sha256: format!("{key:0>64}"),
            size: 3,
            text: Arc::from("YWJj"),
        }
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_archives_newest_first() {
        let c = PySdkCache::default();
        c.insert(archive("a"));
        c.insert(archive("b"));
        c.insert(archive("c"));
        assert_eq!(c.lock().len(), MAX_ARCHIVES);
        assert_eq!(c.newest().map(|a| a.key.clone()).as_deref(), Some("c"));
        assert!(c.by_key("a").is_none(), "the oldest went first");
        c.insert(archive("b"));
        assert_eq!(c.lock().len(), 2, "one archive per key");
        assert_eq!(c.newest().map(|a| a.key.clone()).as_deref(), Some("b"));
        assert_eq!(c.to_json()["archive_bytes"], 6);
    }

    #[test]
    fn pooled_vms_are_planted_only_while_python_runs_want_iii() {
        let c = PySdkCache::default();
        c.note_wanted();
        assert!(!c.preplant_due(Instant::now()), "no archive yet");
        let c = PySdkCache::default();
        c.insert(archive("a"));
        assert!(!c.preplant_due(Instant::now()), "no run wanted iii yet");
        c.note_wanted();
        assert!(c.preplant_due(Instant::now()));
        let later = Instant::now() + PREPLANT_WINDOW;
        assert!(!c.preplant_due(later), "the window has passed");
    }

    #[test]
    fn a_pack_report_is_parsed_and_checked() {
        let out = |stdout: &str, code| ExecOutput {
            stdout: stdout.into(),
            exit_code: Some(code),
            ..ExecOutput::default()
        };
        let sha = "ab".repeat(32);
        let good = format!(r#"{{"key":"k","size":12,"sha256":"{sha}"}}"#);
        assert_eq!(
            parse_packed(&out(&good, 0)),
            Some(("k".into(), 12, sha.clone()))
        );
        assert_eq!(parse_packed(&out(&good, 3)), None);
        assert_eq!(
            parse_packed(&out(r#"{"key":"k","size":12,"sha256":"xyz"}"#, 0)),
            None
        );
        assert_eq!(parse_packed(&out("not json", 0)), None);
    }

    #[test]
    fn the_digest_is_lowercase_hex_sha256() {
        assert_eq!(
            hex_sha256(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
