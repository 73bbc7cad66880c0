//! Namespaced process spawning: the double's stand-in for a microVM.
//!
//! Each sandbox owns a host scratch directory that serves as the root of
//! every exec (hakoniwa `rootdir` + `Runctl::RootdirRW`). Over it go its
//! image's rootfs directories (`/usr`, `/etc`, `/opt`, `/root`, `/var`...:
//! overlays of the host's directories and the image's one shared writable
//! layer, see `image_layer`), a fresh devfs at `/dev` and a procfs at
//! `/proc`. Writes into the image rootfs are seen by every sandbox of the
//! image, as on the daemon; the host's files are never touched. Files a
//! guest writes anywhere else (`/tmp/x`, `/run/x`, `/newdir/f`) land in the
//! scratch directory: they persist across that sandbox's execs, no other
//! sandbox sees them, and they vanish when it stops. The network namespace
//! is the host's, so guests reach the engine on 127.0.0.1.
//!
//! Every exec runs in its own mount, user and PID namespace. PID 1 there is
//! a tiny init (a closure of this process) that forks the guest program,
//! reaps orphans and exits with the program's status (128+signal when it was
//! killed). Making the program PID 1 itself would change its signal
//! semantics (PID 1 ignores default-action signals from inside its
//! namespace). When PID 1 dies the kernel kills everything left in the
//! namespace, so SIGKILLing it kills the whole process tree, and by the time
//! hakoniwa's reaper (the namespace's parent) has exited, nothing of the exec
//! remains.
//!
//! hakoniwa forks, and marks its first child with PDEATHSIG=SIGKILL, which
//! the kernel ties to the forking *thread*. All spawns therefore happen on
//! one long-lived spawner thread; when it ends (the double is dropped), any
//! process still alive is killed.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hakoniwa::{Container, MountOptions, Namespace, Runctl, Stdio};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::guest_path::GuestView;
use super::image_layer::{ExecWorkdirs, ImageLayer};
use super::network::GuestNet;

/// Moves the calling thread into the network namespace `fd`.
fn set_net(fd: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns on a namespace fd this process holds open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Each stream is silently cut at 1 MiB, as the daemon's output sink does.
pub const OUTPUT_CAP: usize = 1_048_576;

/// Exit status the init reports when it cannot run the program at all.
const INIT_FAILURE: i32 = 125;

/// Linux capability number of CAP_SYS_ADMIN, dropped from the guest's
/// bounding set so guest root cannot unmount or remount its rootfs.
const CAP_SYS_ADMIN: libc::c_ulong = 21;

/// Top-level host directories an image rootfs is layered over. `usr` and
/// `etc` are required.
const HOST_DIRS: [&str; 8] = [
    "usr", "etc", "bin", "sbin", "lib", "lib64", "lib32", "libx32",
];

/// How the host's top level maps into every sandbox.
#[derive(Debug, Clone)]
pub struct HostLayout {
    /// Names overlaid from the host (real directories there).
    pub lowered: Vec<String>,
    /// Names that are symlinks on the host (e.g. `bin -> usr/bin` on a
    /// merged-/usr system); recreated as the same symlinks in each scratch.
    pub symlinks: Vec<(String, PathBuf)>,
}

impl HostLayout {
    /// Reads the host's top level. Errors when `/usr` or `/etc` is missing:
    /// without them no guest program can run.
    pub fn detect() -> Result<HostLayout, String> {
        let mut lowered = Vec::new();
        let mut symlinks = Vec::new();
        for name in HOST_DIRS {
            let p = Path::new("/").join(name);
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Ok(target) = std::fs::read_link(&p) {
                    symlinks.push((name.to_string(), target));
                }
            } else if meta.is_dir() {
                lowered.push(name.to_string());
            }
        }
        for required in ["usr", "etc"] {
            if !lowered.iter().any(|n| n == required) {
                return Err(format!("host has no /{required} directory to layer"));
            }
        }
        Ok(HostLayout { lowered, symlinks })
    }
}

/// A sandbox's private root on the host.
#[derive(Debug)]
pub struct Scratch {
    view: GuestView,
}

impl Scratch {
    /// Creates `temp_dir()/scr-sandbox-<id>` with the guest's skeleton:
    /// mount points for the image's rootfs directories, host symlinks, and
    /// the private `/tmp` and `/run`.
    pub fn create(
        layout: &HostLayout,
        layer: Arc<ImageLayer>,
        id: Uuid,
    ) -> std::io::Result<Scratch> {
        let root = std::env::temp_dir().join(format!("scr-sandbox-{id}"));
        std::fs::create_dir(&root)?;
        let result = (|| {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
            for (dir, mode) in [
                ("tmp", 0o1777),
                ("run", 0o755),
                ("dev", 0o755),
                ("proc", 0o555),
            ] {
                let p = root.join(dir);
                std::fs::create_dir(&p)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
            }
            for d in layer.dirs() {
                std::fs::create_dir(root.join(&d.name))?;
            }
            for (name, target) in &layout.symlinks {
                symlink(target, root.join(name))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&root);
            return Err(e);
        }
        Ok(Scratch {
            view: GuestView::new(root, layer),
        })
    }

    /// The scratch directory.
    pub fn path(&self) -> &Path {
        self.view.root()
    }

    /// The guest's view of this scratch.
    pub fn view(&self) -> &GuestView {
        &self.view
    }

    /// Deletes the scratch tree. Only call once no exec is alive in it.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.path()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// One program to run inside a sandbox.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// Absolute guest path of the binary (already looked up in PATH).
    pub program: String,
    /// argv, argv[0] included.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Absolute guest working directory.
    pub workdir: String,
    /// Bytes fed to stdin before EOF.
    pub stdin: Vec<u8>,
    /// Share the host's network namespace (`network:true`). Otherwise the
    /// exec gets a private one with only loopback, as a VM without a NIC.
    pub network: bool,
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitKind {
    /// The guest program's exit status, or 128+signal.
    Code(i32),
    /// The container itself could not be set up or was killed.
    ContainerFailure(String),
}

/// What an exec produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: ExitKind,
}

/// A live exec's processes, addressed by pidfd so a recycled pid can never
/// be signalled by mistake.
#[derive(Debug)]
pub struct ProcHandle {
    /// hakoniwa's reaper, the namespace's parent.
    outer: Option<OwnedFd>,
    /// PID 1 of the exec's namespace.
    init: Option<OwnedFd>,
    finished: watch::Receiver<bool>,
    /// Set when the sandbox is being stopped: the exec then reports the
    /// daemon's "vm disconnected" S300 rather than a kill status.
    stopped: AtomicBool,
}

impl ProcHandle {
    /// Records that the sandbox owning this exec is stopping.
    pub fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether the owning sandbox was stopped while this exec ran.
    pub fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Sends `sig` to the exec's PID 1 (or its reaper if PID 1 is unknown).
    pub fn signal(&self, sig: libc::c_int) {
        if let Some(fd) = self.init.as_ref().or(self.outer.as_ref()) {
            pidfd_send_signal(fd, sig);
        }
    }

    /// Kills every process of the exec and waits (up to `patience`) until
    /// they are all gone. SIGKILL to PID 1 makes the kernel kill the whole
    /// namespace; the reaper only exits once that is done, which is what
    /// `finished` reports. The reaper itself is killed only as a last resort.
    pub async fn kill_and_wait(&self, patience: Duration) -> bool {
        if self.is_finished() {
            return true;
        }
        match &self.init {
            Some(fd) => pidfd_send_signal(fd, libc::SIGKILL),
            None => {
                if let Some(fd) = &self.outer {
                    pidfd_send_signal(fd, libc::SIGKILL);
                }
            }
        }
        if self.wait_finished(patience).await {
            return true;
        }
        if let Some(fd) = &self.outer {
            pidfd_send_signal(fd, libc::SIGKILL);
        }
        self.wait_finished(patience).await
    }

    /// Whether every process of the exec has been reaped.
    pub fn is_finished(&self) -> bool {
        *self.finished.borrow()
    }

    /// Waits up to `patience` for the exec to be fully reaped.
    pub async fn wait_finished(&self, patience: Duration) -> bool {
        let mut rx = self.finished.clone();
        let waited = tokio::time::timeout(patience, rx.wait_for(|done| *done)).await;
        matches!(waited, Ok(Ok(_)))
    }
}

/// A spawned exec: its processes, and its outcome once it has ended.
pub struct Running {
    pub handle: Arc<ProcHandle>,
    outcome: oneshot::Receiver<Outcome>,
}

impl Running {
    /// Waits for the exec to end (after its output pipes reached EOF).
    pub async fn outcome(self) -> Outcome {
        self.outcome.await.unwrap_or_else(|_| Outcome {
            stdout: Vec::new(),
            stderr: Vec::new(),
            exit: ExitKind::ContainerFailure("exec collector vanished".to_string()),
        })
    }
}

type SpawnReply = oneshot::Sender<hakoniwa::Result<hakoniwa::Child>>;
/// A command, the sandbox network it joins (if any), and where to answer.
type SpawnJob = (hakoniwa::Command, Option<Arc<GuestNet>>, SpawnReply);

/// Spawns sandboxed processes from one long-lived thread (see module docs).
pub struct Isolation {
    layout: HostLayout,
    /// The double's own state: `<temp>/scr-double-<uuid>/<image>/...`.
    state: PathBuf,
    /// One shared writable layer per image, created on first use.
    layers: Mutex<std::collections::HashMap<String, Arc<ImageLayer>>>,
    jobs: Mutex<Option<mpsc::Sender<SpawnJob>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Isolation {
    /// Reads the host layout and starts the spawner thread. Does not yet
    /// prove namespaces work; see [`Isolation::probe`].
    pub fn new() -> Result<Isolation, String> {
        let layout = HostLayout::detect()?;
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        let thread = std::thread::Builder::new()
            .name("sandbox-spawner".into())
            .spawn(move || {
                // The host's namespace, to come back to after a spawn into a
                // sandbox network (a fork inherits the forking thread's).
                let host_net = std::fs::File::open("/proc/thread-self/ns/net").ok();
                while let Ok((mut cmd, net, reply)) = rx.recv() {
                    let joined = match (&net, &host_net) {
                        (Some(n), Some(_)) => set_net(n.ns_fd()),
                        (Some(_), None) => Err(std::io::Error::other(
                            "the host network namespace is not addressable",
                        )),
                        (None, _) => Ok(()),
                    };
                    let spawned = match joined {
                        Ok(()) => cmd.spawn(),
                        Err(e) => Err(hakoniwa::Error::UnError(format!(
                            "cannot join the sandbox network: {e}"
                        ))),
                    };
                    if let (Some(_), Some(host)) = (&net, &host_net) {
                        if set_net(host.as_raw_fd()).is_err() {
                            // Never spawn another sandbox into a foreign
                            // network: stop serving instead.
                            let _ = reply.send(spawned);
                            break;
                        }
                    }
                    if let Err(Ok(mut child)) = reply.send(spawned) {
                        // The caller went away: do not leave it running.
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            })
            .map_err(|e| format!("cannot start the spawner thread: {e}"))?;
        let state = std::env::temp_dir().join(format!("scr-double-{}", Uuid::new_v4()));
        std::fs::create_dir(&state)
            .map_err(|e| format!("cannot create the double's state directory: {e}"))?;
        Ok(Isolation {
            layout,
            state,
            layers: Mutex::new(std::collections::HashMap::new()),
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// How the host's top level maps into sandboxes.
    pub fn layout(&self) -> &HostLayout {
        &self.layout
    }

    /// The shared writable rootfs layer of `image`, created on first use.
    pub fn layer(&self, image: &str) -> std::io::Result<Arc<ImageLayer>> {
        let mut layers = self.layers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = layers.get(image) {
            return Ok(l.clone());
        }
        let layer = Arc::new(ImageLayer::create(
            self.state.join(format!("image-{image}")),
            &self.layout,
        )?);
        layers.insert(image.to_string(), layer.clone());
        Ok(layer)
    }

    /// A new sandbox of `image`: its private scratch over the image layer.
    pub fn scratch(&self, image: &str, id: Uuid) -> std::io::Result<Scratch> {
        Scratch::create(&self.layout, self.layer(image)?, id)
    }

    /// Deletes every image layer and the state directory. Only once no
    /// sandbox is left.
    pub fn discard_state(&self) {
        self.layers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let _ = std::fs::remove_dir_all(&self.state);
    }

    /// Proves that a sandboxed process really runs in its own root: it
    /// writes `/tmp/<marker>`, which must land in a scratch directory and
    /// not in the host's /tmp, and its parent must be PID 1. Any failure
    /// means isolation is unavailable and the double must not start.
    pub async fn probe(&self) -> Result<(), String> {
        let id = Uuid::new_v4();
        let layer = Arc::new(
            ImageLayer::create(self.state.join(format!("probe-{id}")), &self.layout)
                .map_err(|e| format!("cannot create an image layer: {e}"))?,
        );
        let scratch = Scratch::create(&self.layout, layer.clone(), id)
            .map_err(|e| format!("cannot create a scratch directory: {e}"))?;
        let marker = format!("isolation-probe-{id}");
        let spec = ExecSpec {
            program: "/bin/sh".to_string(),
            argv: vec![
                "sh".into(),
                "-c".into(),
                format!("echo ok > /tmp/{marker} && echo ok > /usr/{marker} && echo $PPID"),
            ],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            workdir: "/".into(),
            stdin: Vec::new(),
            network: true,
        };
        let result = async {
            let running = self
                .spawn(&scratch, &spec)
                .await
                .map_err(|e| format!("cannot spawn a namespaced process: {e}"))?;
            let outcome = tokio::time::timeout(Duration::from_secs(20), running.outcome())
                .await
                .map_err(|_| "a namespaced probe process did not finish in 20 s".to_string())?;
            let stdout = String::from_utf8_lossy(&outcome.stdout).trim().to_string();
            let stderr = String::from_utf8_lossy(&outcome.stderr).trim().to_string();
            if outcome.exit != ExitKind::Code(0) {
                return Err(format!(
                    "a namespaced probe process failed ({:?}): {stderr}",
                    outcome.exit
                ));
            }
            if !scratch.path().join("tmp").join(&marker).is_file() {
                return Err("a guest write to /tmp did not land in its scratch root".into());
            }
            if std::env::temp_dir().join(&marker).exists() {
                return Err("a guest write to /tmp reached the host's /tmp".into());
            }
            if Path::new("/usr").join(&marker).exists() {
                let _ = std::fs::remove_file(Path::new("/usr").join(&marker));
                return Err("a guest write to /usr reached the host's /usr".into());
            }
            let in_layer = layer.dir("usr").map(|d| d.upper.join(&marker));
            if !in_layer.is_some_and(|p| p.is_file()) {
                return Err("a guest write to /usr did not land in the image layer".into());
            }
            if stdout != "1" {
                return Err(format!(
                    "the guest program's parent is pid {stdout:?}, not the namespace's init"
                ));
            }
            // `network:false` sandboxes need a private network namespace.
            let offline = ExecSpec {
                argv: vec!["sh".into(), "-c".into(), "exit 0".into()],
                network: false,
                ..spec.clone()
            };
            let running = self
                .spawn(&scratch, &offline)
                .await
                .map_err(|e| format!("cannot spawn into a private network namespace: {e}"))?;
            let outcome = tokio::time::timeout(Duration::from_secs(20), running.outcome())
                .await
                .map_err(|_| "a network-less probe process did not finish in 20 s".to_string())?;
            if outcome.exit != ExitKind::Code(0) {
                return Err(format!(
                    "a network-less probe process failed ({:?}): {}",
                    outcome.exit,
                    String::from_utf8_lossy(&outcome.stderr).trim()
                ));
            }
            Ok(())
        }
        .await;
        let _ = scratch.remove();
        let _ = layer.remove();
        result.map_err(|e| {
            format!("namespace isolation (user namespaces with overlayfs) is unavailable on this host: {e}")
        })
    }

    /// Starts `spec` inside `scratch`'s sandbox. The output is collected on
    /// helper threads; see [`Running::outcome`].
    pub async fn spawn(&self, scratch: &Scratch, spec: &ExecSpec) -> std::io::Result<Running> {
        self.spawn_in(scratch, spec, None).await
    }

    /// [`Isolation::spawn`], inside `net` (a `network:true` sandbox's own
    /// network) when given; `spec.network` must then be true.
    pub async fn spawn_in(
        &self,
        scratch: &Scratch,
        spec: &ExecSpec,
        net: Option<Arc<GuestNet>>,
    ) -> std::io::Result<Running> {
        let workdirs = scratch.view().layer().workdirs()?;
        let mut cmd = match self.command(scratch, spec, &workdirs) {
            Ok(cmd) => cmd,
            Err(e) => {
                workdirs.remove();
                return Err(e);
            }
        };
        cmd.current_dir(&spec.workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (tx, rx) = oneshot::channel();
        {
            let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let sent = match jobs.as_ref() {
                None => Err(std::io::Error::other("the double is shutting down")),
                Some(jobs) => jobs
                    .send((cmd, net, tx))
                    .map_err(|_| std::io::Error::other("the spawner thread is gone")),
            };
            if let Err(e) = sent {
                workdirs.remove();
                return Err(e);
            }
        }
        let spawned = rx
            .await
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))
            .and_then(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                workdirs.remove();
                return Err(e);
            }
        };

        let outer_pid = child.id() as libc::pid_t;
        let outer = pidfd_open(outer_pid);
        let init = find_init(outer_pid);
        let (done_tx, done_rx) = watch::channel(false);
        let handle = Arc::new(ProcHandle {
            outer,
            init,
            finished: done_rx,
            stopped: AtomicBool::new(false),
        });

        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let input = spec.stdin.clone();
        let (out_tx, out_rx) = oneshot::channel();
        std::thread::Builder::new()
            .name("sandbox-exec".into())
            .spawn(move || {
                let writer = stdin.map(|mut w| {
                    std::thread::spawn(move || {
                        // EPIPE when the program never reads: that is fine.
                        let _ = w.write_all(&input);
                    })
                });
                let out = stdout.map(|r| std::thread::spawn(move || read_capped(r)));
                let err = stderr.map(|r| std::thread::spawn(move || read_capped(r)));
                let exit = match child.wait() {
                    Ok(status) if status.reason.starts_with("process(") => {
                        ExitKind::Code(status.code)
                    }
                    Ok(status) => ExitKind::ContainerFailure(status.reason),
                    Err(e) => ExitKind::ContainerFailure(e.to_string()),
                };
                // The namespace is gone: its overlays no longer use these.
                workdirs.remove();
                let _ = done_tx.send(true);
                let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
                    h.and_then(|h| h.join().ok()).unwrap_or_default()
                };
                let outcome = Outcome {
                    stdout: join(out),
                    stderr: join(err),
                    exit,
                };
                if let Some(w) = writer {
                    let _ = w.join();
                }
                let _ = out_tx.send(outcome);
            })?;
        Ok(Running {
            handle,
            outcome: out_rx,
        })
    }

    /// The hakoniwa command for `spec`: namespaces, mounts, and the init
    /// closure that runs the program.
    fn command(
        &self,
        scratch: &Scratch,
        spec: &ExecSpec,
        workdirs: &ExecWorkdirs,
    ) -> std::io::Result<hakoniwa::Command> {
        let nul = |what: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("nul byte found in provided data ({what})"),
            )
        };
        let program = CString::new(spec.program.as_str()).map_err(|_| nul("program"))?;
        let argv = spec
            .argv
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| nul("argv"))?;
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| nul("env"))?;
        let argv0 = spec.argv.first().cloned().unwrap_or_default();

        let mut container = Container::new();
        container
            .rootdir(scratch.path())
            .runctl(Runctl::RootdirRW)
            .runctl(Runctl::MountFallback);
        let path = |p: &Path| {
            p.to_str().map(str::to_string).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("non-UTF-8 layer path {}", p.display()),
                )
            })
        };
        for d in scratch.view().layer().dirs() {
            let target = format!("/{}", d.name);
            let upper = path(&d.upper)?;
            match &d.lower {
                // `userxattr`: whiteouts and opaque directories work inside
                // the exec's user namespace.
                Some(lower) => {
                    let data = format!(
                        "lowerdir={},upperdir={upper},workdir={},userxattr",
                        path(lower)?,
                        path(&workdirs.for_dir(&d.name))?,
                    );
                    container.mount(
                        "overlay",
                        &target,
                        "overlay",
                        MountOptions::NOSUID,
                        Some(data),
                    );
                }
                None => {
                    container.bindmount_rw(&upper, &target);
                }
            }
        }
        container.devfsmount("/dev");
        let network = spec.network;
        if !network {
            container.unshare(Namespace::Network);
        }

        let init = move || -> i32 {
            if !network {
                loopback_up();
            }
            run_init(&program, &argv, &envp, &argv0)
        };
        // SAFETY: the closure runs in the namespace's PID 1 after fork, in a
        // single-threaded process. It only calls async-signal-safe libc
        // functions (fork, execve, waitpid, write, _exit, prctl) plus
        // allocation, which glibc keeps usable after fork.
        let cmd = unsafe { container.command_from_closure(init) };
        Ok(cmd)
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        // Closing the job channel ends the spawner thread; PDEATHSIG then
        // kills any sandboxed process that is somehow still alive.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
        self.discard_state();
    }
}

/// Brings `lo` up in a fresh network namespace (it starts down), so
/// guest-local loopback works as in a VM without a network device.
pub(super) fn loopback_up() {
    // SAFETY: a throwaway socket and two ioctls on a zeroed, NUL-terminated
    // `ifreq` naming "lo"; every return value is checked or ignored safely.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        }
        libc::close(fd);
    }
}

/// The namespace's PID 1: forks the program, reaps every orphan, and exits
/// with the program's status (128+signal if a signal killed it).
fn run_init(program: &CString, argv: &[CString], envp: &[CString], argv0: &str) -> i32 {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    // SAFETY: plain libc calls on valid, NUL-terminated buffers that outlive
    // them; the child branch never returns (execve or _exit).
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return INIT_FAILURE;
        }
        if pid == 0 {
            libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0);
            libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            let (code, what) = if errno == libc::EACCES {
                (126, "permission denied")
            } else {
                (127, "not found")
            };
            let msg = format!("exec: {argv0}: {what}\n");
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(code);
        }
        loop {
            let mut status: libc::c_int = 0;
            let r = libc::waitpid(-1, &mut status, 0);
            if r == pid {
                if libc::WIFEXITED(status) {
                    return libc::WEXITSTATUS(status);
                }
                if libc::WIFSIGNALED(status) {
                    return 128 + libc::WTERMSIG(status);
                }
            } else if r < 0 && *libc::__errno_location() != libc::EINTR {
                return INIT_FAILURE;
            }
        }
    }
}

/// Reads a stream to EOF, keeping the first [`OUTPUT_CAP`] bytes and
/// draining the rest so the writer never blocks on a full pipe.
fn read_capped(mut r: impl Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    kept
}

/// PID 1 of the exec's namespace, as a pidfd. hakoniwa's reaper forks it
/// before `spawn` returns, so it is listed among the reaper's children.
fn find_init(outer: libc::pid_t) -> Option<OwnedFd> {
    let listed = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse::<libc::pid_t>().ok());
    // Kernels without CONFIG_PROC_CHILDREN: scan for the reaper's child.
    let pid = listed.or_else(|| {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .find(|p| parent_of(*p) == Some(outer))
    })?;
    let fd = pidfd_open(pid)?;
    // The pidfd pins the process; confirm it is still the reaper's child
    // (and not a recycled pid) before trusting it.
    (parent_of(pid) == Some(outer)).then_some(fd)
}

/// Parent pid from `/proc/<pid>/stat` (after the `(comm)` field, which may
/// itself contain spaces and parentheses).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just handed us this fd; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn pidfd_send_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_capped_keeps_exactly_the_cap() {
        let data = vec![b'x'; OUTPUT_CAP + 12345];
        let kept = read_capped(std::io::Cursor::new(data));
        assert_eq!(kept.len(), OUTPUT_CAP);
    }

    #[test]
    fn parent_of_self_is_our_parent() {
        let me = std::process::id() as libc::pid_t;
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() };
        assert_eq!(parent_of(me), Some(ppid));
    }

    fn sh(script: &str) -> ExecSpec {
        ExecSpec {
            program: "/bin/sh".into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            workdir: "/".into(),
            stdin: Vec::new(),
            network: true,
        }
    }

    /// Pids of host processes whose command line contains `marker`.
    fn pids_with(marker: &str) -> Vec<String> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                    .filter(|e| {
                        std::fs::read(e.path().join("cmdline"))
                            .map(|c| String::from_utf8_lossy(&c).contains(marker))
                            .unwrap_or(false)
                    })
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn probe_passes_on_this_host() {
        let iso = Isolation::new().expect("isolation");
        assert_eq!(iso.probe().await, Ok(()));
    }

    #[tokio::test]
    async fn files_persist_per_scratch_and_stay_private() {
        let iso = Isolation::new().expect("isolation");
        let a = iso.scratch("python", Uuid::new_v4()).expect("scratch a");
        let b = iso.scratch("python", Uuid::new_v4()).expect("scratch b");
        let write = "mkdir -p /node_modules/x /newdir && echo 1 > /tmp/f && echo 2 > /node_modules/x/y && echo 3 > /newdir/z";
        let o = iso
            .spawn(&a, &sh(write))
            .await
            .expect("spawn")
            .outcome()
            .await;
        assert_eq!(
            o.exit,
            ExitKind::Code(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let read = "cat /tmp/f /node_modules/x/y /newdir/z";
        let o = iso
            .spawn(&a, &sh(read))
            .await
            .expect("spawn")
            .outcome()
            .await;
        assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n2\n3\n");
        let o = iso
            .spawn(&b, &sh(read))
            .await
            .expect("spawn")
            .outcome()
            .await;
        assert_eq!(o.exit, ExitKind::Code(1));
        assert!(o.stdout.is_empty());
        let _ = a.remove();
        let _ = b.remove();
    }

    #[tokio::test]
    async fn signals_map_to_128_plus_and_background_jobs_die_with_the_exec() {
        let iso = Isolation::new().expect("isolation");
        let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
        let o = iso
            .spawn(&s, &sh("kill -9 $$"))
            .await
            .expect("spawn")
            .outcome()
            .await;
        assert_eq!(o.exit, ExitKind::Code(137));
        let marker = format!(
            "{}.{}",
            4000 + rand::random::<u16>() % 1000,
            rand::random::<u32>()
        );
        let o = iso
            .spawn(&s, &sh(&format!("sleep {marker} & echo started")))
            .await
            .expect("spawn")
            .outcome()
            .await;
        assert_eq!(o.exit, ExitKind::Code(0));
        assert!(
            pids_with(&marker).is_empty(),
            "background job survived its exec"
        );
        let _ = s.remove();
    }

    #[tokio::test]
    async fn kill_and_wait_leaves_no_process() {
        let iso = Isolation::new().expect("isolation");
        let s = iso.scratch("python", Uuid::new_v4()).expect("scratch");
        let marker = format!(
            "{}.{}",
            5000 + rand::random::<u16>() % 1000,
            rand::random::<u32>()
        );
        let script = format!("sh -c 'sleep {marker}' & sleep {marker}; echo never");
        let running = iso.spawn(&s, &sh(&script)).await.expect("spawn");
        let handle = running.handle.clone();
        let appeared = async {
            while pids_with(&marker).len() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        assert!(tokio::time::timeout(Duration::from_secs(10), appeared)
            .await
            .is_ok());
        assert!(handle.kill_and_wait(Duration::from_secs(5)).await);
        assert_eq!(pids_with(&marker), Vec::<String>::new());
        let o = running.outcome().await;
        assert!(o.stdout.is_empty());
        let _ = s.remove();
    }

    #[test]
    fn layout_requires_usr_and_etc() {
        let layout = HostLayout::detect().expect("this host has /usr and /etc");
        assert!(layout.lowered.iter().any(|n| n == "usr"));
        assert!(layout.lowered.iter().any(|n| n == "etc"));
    }
}
