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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::error::redact_uuids;
use crate::guest;
use crate::metering::charge_install;
use crate::runtime::Manager;
use crate::sandbox::{ExecOutput, ExecParams, SandboxError};

/// Archives kept at once (one per interpreter key; the oldest goes first).
pub(crate) const MAX_ARCHIVES: usize = 2;
/// Largest archive the worker keeps (raw bytes).
pub(crate) const MAX_ARCHIVE_BYTES: usize = 32 << 20;
/// Raw bytes per read exec and per planted chunk: a multiple of 3, so the
/// base64 slices join without padding, and 960 KiB as base64, under the
/// daemon's 1 MiB stdout cut.
const SLICE: usize = 720 * 1024;
const _: () = assert!(SLICE % 3 == 0 && SLICE / 3 * 4 < guest::DAEMON_STREAM_CAP);
/// Planted chunks written at once (the daemon runs 4 calls per sandbox).
const PARALLEL_WRITES: usize = 4;
const ARCHIVE_PATH: &str = "/tmp/.scr/sdk.tgz";
const CHUNK_DIR: &str = "/tmp/.scr/sdk-chunks";

/// The exit codes of `sdk_archive.py unpack`.
const UNPACK_KEY_DIFFERS: i32 = 10;

/// One installed SDK tree, packed.
struct Archive {
    /// The interpreter key measured inside the VM that installed it.
    key: String,
    sha256: String,
    size: usize,
    /// The archive as base64 text chunks of [`SLICE`] raw bytes, ready to plant.
    chunks: Vec<Arc<str>>,
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
    fill: tokio::sync::Mutex<()>,
    counters: SdkCounters,
    /// When a python run last wanted `iii`.
    wanted_at: Mutex<Option<Instant>>,
}

fn nanos(d: Duration) -> u64 {
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
    fn preplant_due(&self, now: Instant) -> bool {
        let wanted = *self.wanted_at.lock().unwrap_or_else(|p| p.into_inner());
        wanted.is_some_and(|t| now.duration_since(t) < PREPLANT_WINDOW) && self.newest().is_some()
    }

    fn newest(&self) -> Option<Arc<Archive>> {
        self.lock().front().cloned()
    }

    fn by_key(&self, key: &str) -> Option<Arc<Archive>> {
        self.lock().iter().find(|a| a.key == key).cloned()
    }

    fn insert(&self, a: Archive) {
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

/// `python3 -c sdk_archive.py <args…>` with the SDK budget.
fn archive_exec(args: &[&str], timeout_ms: u64) -> ExecParams {
    let mut argv = vec![
        "python3".to_string(),
        "-c".to_string(),
        guest::PYTHON_SDK_ARCHIVE.to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    ExecParams {
        argv,
        stdin: None,
        env: Default::default(),
        timeout_ms,
        workdir: Some(guest::WORKDIR.into()),
    }
}

/// How planting an archive went.
enum Planted {
    Installed,
    /// The VM's python is not the archive's: its own key.
    KeyDiffers(String),
    Failed,
}

impl Manager {
    /// Makes the PyPI iii-sdk importable in a python VM: from the worker's
    /// archive when one fits, else by pip. `pristine`: no tenant code has run
    /// in this VM, so what it installs may be archived for other VMs.
    /// Only a VM that is gone is an error; any other failure leaves the
    /// SDK absent and the guest's `iii` explains.
    pub(crate) async fn prepare_python_sdk(
        &self,
        sandbox_id: &str,
        pristine: bool,
    ) -> Result<(), SandboxError> {
        let cache = self.python_sdk();
        cache.note_wanted();
        let mut tried: Vec<String> = Vec::new();
        if self.plant_cached(sandbox_id, &mut tried).await? {
            return Ok(());
        }
        // Cold: one pristine VM at a time installs and archives; the others
        // wait for its archive rather than each paying pip. A VM that cannot
        // be archived only waits for a fill already under way.
        let _gate = if pristine {
            Some(cache.fill.lock().await)
        } else {
            if cache.fill.try_lock().is_err() {
                drop(cache.fill.lock().await);
            }
            None
        };
        if self.plant_cached(sandbox_id, &mut tried).await? {
            return Ok(());
        }
        if self.pip_install(sandbox_id).await? && pristine {
            self.capture(sandbox_id).await?;
        }
        Ok(())
    }

    /// Plants the worker's archive, if it has one and python runs use `iii`
    /// lately, in a VM no tenant has used yet (a pooled VM). Never pip:
    /// true when the SDK is in place.
    pub(crate) async fn plant_archived_sdk(&self, sandbox_id: &str) -> Result<bool, SandboxError> {
        if !self.python_sdk().preplant_due(Instant::now()) {
            return Ok(false);
        }
        self.plant_cached(sandbox_id, &mut Vec::new()).await
    }

    /// Plants the newest archive not tried yet (and, when the VM's key
    /// differs, the archive of its key). True when the SDK is in place.
    async fn plant_cached(
        &self,
        sandbox_id: &str,
        tried: &mut Vec<String>,
    ) -> Result<bool, SandboxError> {
        let cache = self.python_sdk();
        let mut next = cache.newest();
        while let Some(a) = next.take() {
            if tried.contains(&a.sha256) {
                return Ok(false);
            }
            tried.push(a.sha256.clone());
            match self.plant(sandbox_id, &a).await? {
                Planted::Installed => return Ok(true),
                Planted::KeyDiffers(key) => {
                    cache
                        .counters
                        .key_mismatches
                        .fetch_add(1, Ordering::Relaxed);
                    next = cache.by_key(&key);
                }
                Planted::Failed => return Ok(false),
            }
        }
        Ok(false)
    }

    async fn plant(&self, sandbox_id: &str, a: &Archive) -> Result<Planted, SandboxError> {
        let counters = &self.python_sdk().counters;
        let start = Instant::now();
        let names: Vec<String> = (0..a.chunks.len())
            .map(|i| format!("{CHUNK_DIR}/c{i}"))
            .collect();
        let mut writes = Vec::with_capacity(names.len());
        for (chunks, names) in a
            .chunks
            .chunks(PARALLEL_WRITES)
            .zip(names.chunks(PARALLEL_WRITES))
        {
            let batch = chunks
                .iter()
                .zip(names)
                .map(|(c, name)| self.write_file(sandbox_id, name, c));
            writes.extend(futures_util::future::join_all(batch).await);
        }
        for w in writes {
            match w {
                Err(e) if e.is_gone() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %redact_uuids(&e.to_string()), "planting the python SDK archive failed; falling back to pip");
                    counters.plant_failures.fetch_add(1, Ordering::Relaxed);
                    return Ok(Planted::Failed);
                }
                Ok(()) => {}
            }
        }
        let written = start.elapsed();
        let n = a.chunks.len().to_string();
        let out = self
            .exec(
                sandbox_id,
                archive_exec(
                    &["unpack", &a.key, &a.sha256, &n, CHUNK_DIR],
                    self.config().sdk_install_timeout_ms,
                ),
            )
            .await;
        let planted = match out {
            Err(e) if e.is_gone() => return Err(e),
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "unpacking the python SDK archive failed; falling back to pip");
                Planted::Failed
            }
            Ok(o) if o.exit_code == Some(0) => Planted::Installed,
            Ok(o) if o.exit_code == Some(UNPACK_KEY_DIFFERS) => {
                tracing::info!(
                    vm_key = o.stdout.trim(),
                    "this VM's python does not match the SDK archive"
                );
                Planted::KeyDiffers(o.stdout.trim().to_string())
            }
            Ok(o) => {
                tracing::warn!(exit_code = ?o.exit_code, stderr = %tail(&o.stderr), "the python SDK archive was refused; falling back to pip");
                Planted::Failed
            }
        };
        tracing::debug!(
            writes_ms = written.as_millis() as u64,
            unpack_ms = (start.elapsed() - written).as_millis() as u64,
            chunks = a.chunks.len(),
            "planted the python SDK archive"
        );
        match planted {
            Planted::Installed => {
                counters.plants.fetch_add(1, Ordering::Relaxed);
                counters
                    .plant_nanos
                    .fetch_add(nanos(start.elapsed()), Ordering::Relaxed);
            }
            Planted::Failed => {
                counters.plant_failures.fetch_add(1, Ordering::Relaxed);
            }
            Planted::KeyDiffers(_) => {}
        }
        Ok(planted)
    }

    /// The pip install, as its own exec with its own budget. True when the
    /// SDK got installed.
    async fn pip_install(&self, sandbox_id: &str) -> Result<bool, SandboxError> {
        let counters = &self.python_sdk().counters;
        let start = Instant::now();
        let out = self
            .exec(
                sandbox_id,
                guest::python_sdk_install(self.config().sdk_install_timeout_ms),
            )
            .await;
        let took = start.elapsed();
        counters.pip_installs.fetch_add(1, Ordering::Relaxed);
        counters.pip_nanos.fetch_add(nanos(took), Ordering::Relaxed);
        charge_install(took);
        let ok = match out {
            Err(e) if e.is_gone() => return Err(e),
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "installing the python SDK failed");
                false
            }
            Ok(o) if o.exit_code != Some(0) => {
                tracing::warn!(
                    exit_code = ?o.exit_code,
                    stderr = %tail(&o.stderr),
                    "installing the python SDK failed; `iii` will raise on first use"
                );
                false
            }
            Ok(_) => true,
        };
        if !ok {
            counters.pip_failures.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ok)
    }

    /// Packs the SDK just installed in a pristine VM and keeps it.
    async fn capture(&self, sandbox_id: &str) -> Result<(), SandboxError> {
        let cache = self.python_sdk();
        let start = Instant::now();
        let got = self.read_archive(sandbox_id).await;
        match got {
            Err(e) if e.is_gone() => return Err(e),
            Err(e) => {
                tracing::warn!(error = %redact_uuids(&e.to_string()), "archiving the python SDK failed; the next VM installs it again");
                cache
                    .counters
                    .capture_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) => {
                cache
                    .counters
                    .capture_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ok(Some(a)) => {
                tracing::info!(bytes = a.size, key = %a.key, "python SDK archived for later VMs");
                cache.insert(a);
                cache.counters.captures.fetch_add(1, Ordering::Relaxed);
                self.plant_pooled();
                cache
                    .counters
                    .capture_nanos
                    .fetch_add(nanos(start.elapsed()), Ordering::Relaxed);
            }
        }
        Ok(())
    }

    async fn read_archive(&self, sandbox_id: &str) -> Result<Option<Archive>, SandboxError> {
        let budget = self.config().sdk_install_timeout_ms;
        let packed = self
            .exec(sandbox_id, archive_exec(&["pack", ARCHIVE_PATH], budget))
            .await?;
        let Some((key, size, sha256)) = parse_packed(&packed) else {
            tracing::warn!(exit_code = ?packed.exit_code, stderr = %tail(&packed.stderr), "packing the python SDK failed");
            return Ok(None);
        };
        if size > MAX_ARCHIVE_BYTES {
            tracing::warn!(
                size,
                "the python SDK archive is over the cache bound; not kept"
            );
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(size);
        let len = SLICE.to_string();
        for off in (0..size).step_by(SLICE) {
            let out = self
                .exec(
                    sandbox_id,
                    archive_exec(&["read", ARCHIVE_PATH, &off.to_string(), &len], budget),
                )
                .await?;
            let Ok(slice) = base64::engine::general_purpose::STANDARD.decode(out.stdout.trim())
            else {
                return Ok(None);
            };
            bytes.extend_from_slice(&slice);
        }
        if bytes.len() != size || hex_sha256(&bytes) != sha256 {
            tracing::warn!("the python SDK archive read out does not match its digest; not kept");
            return Ok(None);
        }
        let chunks = bytes
            .chunks(SLICE)
            .map(|c| Arc::from(base64::engine::general_purpose::STANDARD.encode(c)))
            .collect();
        Ok(Some(Archive {
            key,
            sha256,
            size,
            chunks,
        }))
    }
}

/// `{"key","size","sha256"}` from a successful pack.
fn parse_packed(out: &ExecOutput) -> Option<(String, usize, String)> {
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

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn tail(s: &str) -> String {
    let s = s.trim_end();
    let mut start = s.len().saturating_sub(400);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(key: &str) -> Archive {
        Archive {
            key: key.into(),
            sha256: format!("{key:0>64}"),
            size: 3,
            chunks: vec![Arc::from("YWJj")],
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
