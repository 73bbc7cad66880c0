//! The sandbox table: admission (capacity, exec cap), the idle clock, the
//! stop sequence shared by `sandbox::stop`, the reaper and shutdown, and
//! the reaper itself.
//!
//! It follows the daemon's registry: a stopped sandbox's entry is *removed*,
//! so a later call on it answers S002. A reaped sandbox is marked stopped
//! (S004) from the moment the reaper claims it; one stopped by
//! `sandbox::stop` only once the stop's grace is over, so during that grace
//! calls reach for a VM that is gone: an exec fails S300 (the shell socket
//! refuses), an fs op S216, `list` shows it `stopped: false`, and a second
//! stop pays a grace of its own. Exec start and end, and every fs op, reset
//! the idle clock; `sandbox::list` does not. A sandbox is reaped once idle
//! *strictly longer* than its `idle_timeout_secs`, unless an exec is in
//! flight, which protects it for a further `max_exec_timeout_ms` + 60 s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::Notify;
use uuid::Uuid;

use super::error::DaemonError;
use super::isolation::{GuestVm, ProcHandle, Scratch};
use super::network::GuestNet;

/// How long a stop waits for an exec's processes to be reaped after
/// SIGKILL before giving up on them.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// One live sandbox.
pub(crate) struct Entry {
    pub(crate) name: Option<String>,
    pub(crate) image: String,
    pub(crate) created_at: Instant,
    pub(crate) last_activity: Instant,
    pub(crate) exec_in_flight: u32,
    pub(crate) idle_timeout_secs: u64,
    pub(crate) stopped: bool,
    /// Its VM was ended by a `sandbox::stop` whose grace still runs (not
    /// yet `stopped`, as on the daemon).
    vm_ended: bool,
    /// When the modelled guest boot completes.
    pub(crate) ready_at: Instant,
    pub(crate) scratch: Arc<Scratch>,
    /// Its running init, every exec's parent.
    pub(crate) vm: Arc<GuestVm>,
    /// Create-time environment, inherited by every exec.
    pub(crate) env: Arc<Vec<(String, String)>>,
    /// Its own network (`network:true` on a host with slirp4netns).
    pub(crate) net: Option<Arc<GuestNet>>,
    procs: HashMap<u64, Arc<ProcHandle>>,
    next_proc: u64,
}

impl Entry {
    /// A fresh, idle sandbox.
    pub(crate) fn new(
        name: Option<String>,
        image: String,
        idle_timeout_secs: u64,
        boot_delay: Duration,
        scratch: Arc<Scratch>,
        vm: GuestVm,
        env: Vec<(String, String)>,
    ) -> Entry {
        let now = Instant::now();
        Entry {
            name,
            image,
            created_at: now,
            last_activity: now,
            exec_in_flight: 0,
            idle_timeout_secs,
            stopped: false,
            vm_ended: false,
            ready_at: now + boot_delay,
            scratch,
            vm: Arc::new(vm),
            env: Arc::new(env),
            net: None,
            procs: HashMap::new(),
            next_proc: 0,
        }
    }
}

impl Entry {
    /// Neither being stopped nor reaped: its VM still runs.
    fn running(&self) -> bool {
        !self.stopped && !self.vm_ended
    }
}

/// What an exec or fs op needs from its sandbox.
#[derive(Clone)]
pub(crate) struct Guest {
    pub(crate) scratch: Arc<Scratch>,
    pub(crate) env: Arc<Vec<(String, String)>>,
    pub(crate) ready_at: Instant,
    pub(crate) vm: Arc<GuestVm>,
}

/// One row of `sandbox::list`.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) sandbox_id: String,
    pub(crate) name: Option<String>,
    pub(crate) image: String,
    pub(crate) age_secs: u64,
    pub(crate) exec_in_progress: bool,
    pub(crate) exec_in_flight: u32,
    pub(crate) exec_slots_free: u32,
    pub(crate) stopped: bool,
}

/// A sandbox claimed for stopping: its execs, its init, its scratch
/// directory.
pub(crate) struct StopWork {
    pub(crate) id: Uuid,
    procs: Vec<Arc<ProcHandle>>,
    vm: Arc<GuestVm>,
    scratch: Arc<Scratch>,
}

impl StopWork {
    /// Synchronous last-resort teardown (for `Drop`): SIGKILL the sandbox,
    /// give its processes a moment to be reaped, delete the scratch
    /// directory.
    pub(crate) fn kill_now(self) {
        for p in &self.procs {
            p.mark_stopped();
        }
        self.vm.kill_now(Duration::from_secs(2));
        let _ = self.scratch.remove();
    }
}

/// What `begin_stop` found.
pub(crate) enum StopClaim {
    /// This caller stops it.
    Claimed(StopWork),
    /// The reaper (or shutdown) already is: it is marked stopped.
    AlreadyStopping,
    /// Another `sandbox::stop` ended its VM and is in its grace: the daemon
    /// signals the dead VM again and pays a grace of its own.
    VmEnded,
}

/// The sandbox table.
pub(crate) struct Registry {
    inner: Mutex<HashMap<Uuid, Entry>>,
    exec_cap: u32,
    exec_ended: Notify,
    /// Set at shutdown: no new sandbox may appear after the final sweep.
    closed: AtomicBool,
}

impl Registry {
    /// A registry admitting `exec_cap` concurrent execs per sandbox (0 acts
    /// as 1, as on the daemon).
    pub(crate) fn new(exec_cap: usize) -> Registry {
        Registry {
            inner: Mutex::new(HashMap::new()),
            exec_cap: u32::try_from(exec_cap).unwrap_or(u32::MAX).max(1),
            exec_ended: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, Entry>> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single field write), so keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live entries, stopping ones included (they still count against
    /// capacity until removed, as on the daemon).
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Adds a sandbox unless that would exceed `capacity` (or the registry
    /// is closed); a refused sandbox's scratch directory is deleted.
    pub(crate) fn insert(
        &self,
        id: Uuid,
        entry: Entry,
        capacity: usize,
    ) -> Result<(), DaemonError> {
        let mut map = self.lock();
        let refusal = if self.closed.load(Ordering::SeqCst) {
            Some(DaemonError::BootFailed(
                "the sandbox daemon is shutting down".into(),
            ))
        } else if map.len() >= capacity {
            Some(capacity_error(capacity))
        } else {
            None
        };
        if let Some(err) = refusal {
            drop(map);
            let _ = entry.scratch.remove();
            return Err(err);
        }
        map.insert(id, entry);
        Ok(())
    }

    /// The sandbox for an fs op: S002 unknown, S004 being reaped, S216 its
    /// VM ended by a stop in its grace. Resets the idle clock.
    pub(crate) fn touch(&self, id: Uuid) -> Result<Guest, DaemonError> {
        let mut map = self.lock();
        let e = map
            .get_mut(&id)
            .ok_or_else(|| DaemonError::NotFound(id.to_string()))?;
        if e.stopped {
            return Err(DaemonError::AlreadyStopped(id.to_string()));
        }
        if e.vm_ended {
            return Err(DaemonError::FsIo(format!(
                "shell client error: {}",
                relay_down(id)
            )));
        }
        e.last_activity = Instant::now();
        Ok(guest_of(e))
    }

    /// Admits one exec: S002 unknown, S004 being reaped, S003 at the cap,
    /// S300 its VM ended by a stop in its grace. Resets the idle clock.
    pub(crate) fn begin_exec(&self, id: Uuid) -> Result<Guest, DaemonError> {
        let mut map = self.lock();
        let e = map
            .get_mut(&id)
            .ok_or_else(|| DaemonError::NotFound(id.to_string()))?;
        if e.stopped {
            return Err(DaemonError::AlreadyStopped(id.to_string()));
        }
        if e.exec_in_flight >= self.exec_cap {
            return Err(DaemonError::ConcurrentExec(id.to_string()));
        }
        e.last_activity = Instant::now();
        if e.vm_ended {
            return Err(DaemonError::BootFailed(format!(
                "shell connect: {}",
                relay_down(id)
            )));
        }
        e.exec_in_flight += 1;
        Ok(guest_of(e))
    }

    /// Releases one exec slot and resets the idle clock.
    pub(crate) fn end_exec(&self, id: Uuid) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.exec_in_flight = e.exec_in_flight.saturating_sub(1);
            e.last_activity = Instant::now();
        }
        self.exec_ended.notify_waiters();
    }

    /// Whether the sandbox is still live (not stopping, not gone).
    pub(crate) fn is_live(&self, id: Uuid) -> bool {
        self.lock().get(&id).is_some_and(Entry::running)
    }

    /// Records a spawned exec so a stop can kill it. `None` when the
    /// sandbox is stopping or gone: the caller must kill it itself.
    pub(crate) fn attach_proc(&self, id: Uuid, handle: Arc<ProcHandle>) -> Option<u64> {
        let mut map = self.lock();
        let e = map.get_mut(&id).filter(|e| e.running())?;
        let key = e.next_proc;
        e.next_proc += 1;
        e.procs.insert(key, handle);
        Some(key)
    }

    /// Forgets a finished exec.
    pub(crate) fn detach_proc(&self, id: Uuid, key: u64) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.procs.remove(&key);
        }
    }

    /// Starts a `sandbox::stop`: S002 if unknown. The sandbox is not
    /// marked stopped until its grace is over (`finish_stop`).
    pub(crate) fn begin_stop(&self, id: Uuid) -> Result<StopClaim, DaemonError> {
        let mut map = self.lock();
        let e = map
            .get_mut(&id)
            .ok_or_else(|| DaemonError::NotFound(id.to_string()))?;
        if e.stopped {
            return Ok(StopClaim::AlreadyStopping);
        }
        if e.vm_ended {
            return Ok(StopClaim::VmEnded);
        }
        e.vm_ended = true;
        Ok(StopClaim::Claimed(work_of(id, e)))
    }

    /// The end of a second `sandbox::stop` of a sandbox whose VM another
    /// one ended: a grace of its own, then it is marked stopped, if the
    /// first stop has not removed it yet (that one removes it).
    pub(crate) async fn finish_stop_again(&self, id: Uuid, grace: Duration) {
        tokio::time::sleep(grace).await;
        let mut map = self.lock();
        if let Some(e) = map.get_mut(&id) {
            e.stopped = true;
        }
    }

    /// Claims `id` for reaping if it has been idle strictly longer than its
    /// timeout (and, when busy, longer than timeout + `busy_grace`). The
    /// decision and the claim happen under one lock, so an exec admitted in
    /// between cannot be killed.
    pub(crate) fn claim_for_reap(
        &self,
        id: Uuid,
        now: Instant,
        busy_grace: Duration,
    ) -> Option<StopWork> {
        let mut map = self.lock();
        let e = map.get_mut(&id)?;
        if e.stopped {
            return None;
        }
        let idle = now.saturating_duration_since(e.last_activity);
        let timeout = Duration::from_secs(e.idle_timeout_secs);
        if idle <= timeout {
            return None;
        }
        if e.exec_in_flight > 0 && idle <= timeout + busy_grace {
            return None;
        }
        Some(claim(id, e))
    }

    /// Refuses every later `insert` and claims every sandbox, including
    /// those another task is already stopping (that task may be cancelled
    /// by the shutdown; stopping twice is harmless).
    pub(crate) fn close_and_claim_all(&self) -> Vec<StopWork> {
        let mut map = self.lock();
        self.closed.store(true, Ordering::SeqCst);
        map.iter_mut().map(|(id, e)| claim(*id, e)).collect()
    }

    /// Ids of every entry.
    pub(crate) fn ids(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    /// The `sandbox::list` rows. Does not touch the idle clock.
    pub(crate) fn summaries(&self) -> Vec<Summary> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(id, e)| Summary {
                sandbox_id: id.to_string(),
                name: e.name.clone(),
                image: e.image.clone(),
                age_secs: now.saturating_duration_since(e.created_at).as_secs(),
                exec_in_progress: e.exec_in_flight > 0,
                exec_in_flight: e.exec_in_flight,
                exec_slots_free: self.exec_cap.saturating_sub(e.exec_in_flight),
                stopped: e.stopped,
            })
            .collect()
    }

    /// Ids and names of live sandboxes.
    pub(crate) fn live(&self) -> Vec<(String, Option<String>)> {
        self.lock()
            .iter()
            .map(|(id, e)| (id.to_string(), e.name.clone()))
            .collect()
    }

    fn in_flight(&self, id: Uuid) -> u32 {
        self.lock().get(&id).map_or(0, |e| e.exec_in_flight)
    }

    /// Waits (bounded) until no exec of `id` is in flight.
    async fn wait_execs_drained(&self, id: Uuid, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let ended = self.exec_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight(id) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                tracing::warn!(sandbox_id = %id, "execs still in flight after stop");
                return;
            }
        }
    }

    /// The daemon's stop sequence on a claimed sandbox. Its SIGTERM ends
    /// the VM at once (the VM process turns it into the VMM's exit), so the
    /// whole sandbox is killed first: every exec in flight fails as on a VM
    /// that disconnected mid-run, and every process that outlived one dies.
    /// Then the fixed grace, paid whatever the sandbox was doing; then the
    /// scratch directory is deleted and the entry removed.
    pub(crate) async fn finish_stop(&self, work: StopWork, grace: Duration) {
        for p in &work.procs {
            p.mark_stopped();
        }
        if !work.vm.kill_and_wait(KILL_PATIENCE).await {
            tracing::warn!(sandbox_id = %work.id, "a sandbox's processes outlived SIGKILL");
        }
        tokio::time::sleep(grace).await;
        if let Some(e) = self.lock().get_mut(&work.id) {
            e.stopped = true;
        }
        // An exec admitted before the claim but spawned after it kills its
        // own process (attach_proc refuses); wait for it before deleting.
        self.wait_execs_drained(work.id, KILL_PATIENCE).await;
        let scratch = work.scratch.clone();
        let removed = tokio::task::spawn_blocking(move || scratch.remove()).await;
        if !matches!(removed, Ok(Ok(()))) {
            tracing::warn!(sandbox_id = %work.id, "scratch directory not fully removed");
        }
        self.lock().remove(&work.id);
    }

    /// Scans once and stops every sandbox due for reaping.
    pub(crate) async fn reap_once(&self, busy_grace: Duration, grace: Duration) {
        let now = Instant::now();
        for id in self.ids() {
            if let Some(work) = self.claim_for_reap(id, now, busy_grace) {
                tracing::info!(sandbox_id = %id, "reaping idle sandbox");
                self.finish_stop(work, grace).await;
            }
        }
    }
}

fn guest_of(e: &Entry) -> Guest {
    Guest {
        scratch: e.scratch.clone(),
        env: e.env.clone(),
        ready_at: e.ready_at,
        vm: e.vm.clone(),
    }
}

/// Marks `e` stopped (the reaper's and shutdown's claim) and takes what
/// stopping it needs.
fn claim(id: Uuid, e: &mut Entry) -> StopWork {
    e.stopped = true;
    work_of(id, e)
}

fn work_of(id: Uuid, e: &Entry) -> StopWork {
    StopWork {
        id,
        procs: e.procs.values().cloned().collect(),
        vm: e.vm.clone(),
        scratch: e.scratch.clone(),
    }
}

/// S400 at capacity, worded as the daemon words it.
pub(crate) fn capacity_error(capacity: usize) -> DaemonError {
    DaemonError::ResourceLimit(format!("max_concurrent_sandboxes ({capacity}) reached"))
}

/// Runs the reaper until the task is aborted.
pub(crate) async fn run_reaper(
    registry: Arc<Registry>,
    interval: Duration,
    busy_grace: Duration,
    grace: Duration,
) {
    let interval = interval.max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(interval).await;
        registry.reap_once(busy_grace, grace).await;
    }
}

#[cfg(test)]
mod tests;

/// What the daemon's shell client says of a VM whose process is gone: its
/// shell socket (`/tmp/iii-sandbox/<id>/shell.sock`) is still there, and
/// refuses.
fn relay_down(id: Uuid) -> String {
    format!(
        "worker relay not accepting connections: connect(/tmp/iii-sandbox/{id}/shell.sock): Connection refused (os error 111)"
    )
}
