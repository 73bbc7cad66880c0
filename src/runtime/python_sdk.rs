//! The manager's side of the python guest SDK: making `iii` importable in
//! one VM (pip in the first pristine VM, its tree archived out under the 1
//! MiB stdout cut; later VMs planted from the archive and key-checked, pip
//! as the fallback). The worker-wide archive cache is `crate::python_sdk`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;

use super::lease::VmLease;
use crate::error::redact_uuids;
use crate::guest;
use crate::metering::charge_install;
use crate::python_sdk::{
    hex_sha256, nanos, parse_packed, Archive, PySdkCache, ARCHIVE_PATH, CHUNK_DIR,
    MAX_ARCHIVE_BYTES, PARALLEL_WRITES, SLICE, UNPACK_KEY_DIFFERS,
};
use crate::sandbox::{ExecParams, SandboxError, Streamed};

/// What planting the python SDK in a VM reads and tells: the worker's
/// archive cache, the install budget, and who hears of a fresh archive (the
/// pool, to plant the VMs it holds). Nothing else of the manager.
#[derive(Clone, Copy)]
pub(super) struct Planting<'a> {
    pub(super) cache: &'a PySdkCache,
    pub(super) budget_ms: u64,
    pub(super) archived: &'a (dyn Fn() + Send + Sync),
}

/// `python3 -Ic sdk_archive.py <args…>` with the SDK budget (isolated:
/// it runs as root, in the guest's cwd).
fn archive_exec(args: &[&str], timeout_ms: u64) -> ExecParams {
    let mut argv = vec![
        "python3".to_string(),
        "-Ic".to_string(),
        guest::PYTHON_SDK_ARCHIVE.to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    ExecParams {
        argv,
        stdin: None,
        env: Default::default(),
        timeout_ms,
        workdir: Some(guest::WORKDIR.into()),
        stream: None,
    }
}

/// How planting an archive went.
enum Planted {
    Installed,
    /// The VM's python is not the archive's: its own key.
    KeyDiffers(String),
    Failed,
}

/// Makes the PyPI iii-sdk importable in a python VM: from the worker's
/// archive when one fits, else by pip. `pristine`: no tenant code has run
/// in this VM, so what it installs may be archived for other VMs.
/// Only a VM that is gone is an error; any other failure leaves the
/// SDK absent and the guest's `iii` explains.
pub(crate) async fn prepare(
    sdk: Planting<'_>,
    vm: &VmLease,
    pristine: bool,
) -> Result<(), SandboxError> {
    let cache = sdk.cache;
    cache.note_wanted();
    let mut tried: Vec<String> = Vec::new();
    if plant_cached(sdk, vm, &mut tried).await? {
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
    if plant_cached(sdk, vm, &mut tried).await? {
        return Ok(());
    }
    if pip_install(sdk, vm).await? && pristine {
        capture(sdk, vm).await?;
    }
    Ok(())
}

/// Plants the worker's archive, if it has one and python runs use `iii`
/// lately, in a VM no tenant has used yet (a pooled VM). Never pip:
/// true when the SDK is in place.
pub(crate) async fn plant_archived(sdk: Planting<'_>, vm: &VmLease) -> Result<bool, SandboxError> {
    if !sdk.cache.preplant_due(Instant::now()) {
        return Ok(false);
    }
    plant_cached(sdk, vm, &mut Vec::new()).await
}

/// Plants the newest archive not tried yet (and, when the VM's key
/// differs, the archive of its key). True when the SDK is in place.
async fn plant_cached(
    sdk: Planting<'_>,
    vm: &VmLease,
    tried: &mut Vec<String>,
) -> Result<bool, SandboxError> {
    let cache = sdk.cache;
    let mut next = cache.newest();
    while let Some(a) = next.take() {
        if tried.contains(&a.sha256) {
            return Ok(false);
        }
        tried.push(a.sha256.clone());
        match plant(sdk, vm, &a).await? {
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

async fn plant(sdk: Planting<'_>, vm: &VmLease, a: &Archive) -> Result<Planted, SandboxError> {
    let counters = &sdk.cache.counters;
    let start = Instant::now();
    let pieces = match write_archive(vm, a).await {
        Err(e) if e.is_gone() => return Err(e),
        Err(e) => {
            tracing::warn!(error = %redact_uuids(&e.to_string()), "planting the python SDK archive failed; falling back to pip");
            counters.plant_failures.fetch_add(1, Ordering::Relaxed);
            return Ok(Planted::Failed);
        }
        Ok(pieces) => pieces,
    };
    let written = start.elapsed();
    let n = pieces.to_string();
    let out = vm
        .exec(archive_exec(
            &["unpack", &a.key, &a.sha256, &n, CHUNK_DIR],
            sdk.budget_ms,
        ))
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
        pieces,
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

/// Writes the archive's text as `CHUNK_DIR/c0…`: whole through one data
/// channel, so no call payload (and no span of the daemon's) carries
/// megabytes; in [`SLICE`]-sized pieces inline on a bus without
/// channels. Answers how many pieces there are.
async fn write_archive(vm: &VmLease, a: &Archive) -> Result<usize, SandboxError> {
    let whole = format!("{CHUNK_DIR}/c0");
    if vm.write_streamed(&whole, a.text.clone()).await? == Streamed::Written {
        return Ok(1);
    }
    let chunks = a.chunks();
    let names: Vec<String> = (0..chunks.len())
        .map(|i| format!("{CHUNK_DIR}/c{i}"))
        .collect();
    for (chunks, names) in chunks
        .chunks(PARALLEL_WRITES)
        .zip(names.chunks(PARALLEL_WRITES))
    {
        let batch = chunks
            .iter()
            .zip(names)
            .map(|(c, name)| vm.write_file(name, c));
        for w in futures_util::future::join_all(batch).await {
            w?;
        }
    }
    Ok(chunks.len())
}

/// The pip install, as its own exec with its own budget. True when the
/// SDK got installed.
async fn pip_install(sdk: Planting<'_>, vm: &VmLease) -> Result<bool, SandboxError> {
    let counters = &sdk.cache.counters;
    let start = Instant::now();
    let out = vm.exec(guest::python_sdk_install(sdk.budget_ms)).await;
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
async fn capture(sdk: Planting<'_>, vm: &VmLease) -> Result<(), SandboxError> {
    let cache = sdk.cache;
    let start = Instant::now();
    let got = read_archive(sdk, vm).await;
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
            (sdk.archived)();
            cache
                .counters
                .capture_nanos
                .fetch_add(nanos(start.elapsed()), Ordering::Relaxed);
        }
    }
    Ok(())
}

async fn read_archive(sdk: Planting<'_>, vm: &VmLease) -> Result<Option<Archive>, SandboxError> {
    let budget = sdk.budget_ms;
    let packed = vm
        .exec(archive_exec(&["pack", ARCHIVE_PATH], budget))
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
    let bytes = match vm.read_streamed(ARCHIVE_PATH, size).await {
        Ok(Some(bytes)) => bytes,
        Err(e) if e.is_gone() => return Err(e),
        Ok(None) | Err(_) => match read_archive_slices(sdk, vm, size).await? {
            Some(bytes) => bytes,
            None => return Ok(None),
        },
    };
    if bytes.len() != size || hex_sha256(&bytes) != sha256 {
        tracing::warn!("the python SDK archive read out does not match its digest; not kept");
        return Ok(None);
    }
    Ok(Some(Archive {
        key,
        sha256,
        size,
        text: Arc::from(base64::engine::general_purpose::STANDARD.encode(&bytes)),
    }))
}

/// The archive read out through exec stdout in [`SLICE`]s under the
/// daemon's 1 MiB cut, for a bus without data channels (each slice
/// then sits in the daemon's exec span).
async fn read_archive_slices(
    sdk: Planting<'_>,
    vm: &VmLease,
    size: usize,
) -> Result<Option<Vec<u8>>, SandboxError> {
    let budget = sdk.budget_ms;
    let mut bytes = Vec::with_capacity(size);
    let len = SLICE.to_string();
    for off in (0..size).step_by(SLICE) {
        let out = vm
            .exec(archive_exec(
                &["read", ARCHIVE_PATH, &off.to_string(), &len],
                budget,
            ))
            .await?;
        let Ok(slice) = base64::engine::general_purpose::STANDARD.decode(out.stdout.trim()) else {
            return Ok(None);
        };
        bytes.extend_from_slice(&slice);
    }
    Ok(Some(bytes))
}

fn tail(s: &str) -> String {
    let s = s.trim_end();
    let mut start = s.len().saturating_sub(400);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}
