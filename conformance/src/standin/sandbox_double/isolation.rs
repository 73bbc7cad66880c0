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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hakoniwa::{Container, MountOptions, Namespace, Runctl, Stdio};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::image_layer::{ExecWorkdirs, ImageLayer};
use super::network::GuestNet;

mod process;
mod scratch;
pub(crate) use process::*;
pub(crate) use scratch::{HostLayout, Scratch};

/// Moves the calling thread into the network namespace `fd`.
fn set_net(fd: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns on a namespace fd this process holds open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Each stream is silently cut at 1 MiB, as the daemon's output sink does.
pub(crate) const OUTPUT_CAP: usize = 1_048_576;

/// Exit status the init reports when it cannot run the program at all.
const INIT_FAILURE: i32 = 125;

/// Linux capability number of CAP_SYS_ADMIN, dropped from the guest's
/// bounding set so guest root cannot unmount or remount its rootfs.
const CAP_SYS_ADMIN: libc::c_ulong = 21;

type SpawnReply = oneshot::Sender<hakoniwa::Result<hakoniwa::Child>>;
/// A command, the sandbox network it joins (if any), and where to answer.
type SpawnJob = (hakoniwa::Command, Option<Arc<GuestNet>>, SpawnReply);

/// Spawns sandboxed processes from one long-lived thread (see module docs).
pub(crate) struct Isolation {
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
    pub(crate) fn new() -> Result<Isolation, String> {
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

    /// The shared writable rootfs layer of `image`, created on first use.
    pub(crate) fn layer(&self, image: &str) -> std::io::Result<Arc<ImageLayer>> {
        let mut layers = self.layers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = layers.get(image) {
            return Ok(l.clone());
        }
        let layer = Arc::new(ImageLayer::create(
            self.state.join(format!("image-{image}")),
            &self.layout,
        )?);
        if let Err(e) = super::presets::apply(image, &layer) {
            tracing::warn!(image, error = %e, "the {image} image lacks some of its preset's contents");
        }
        layers.insert(image.to_string(), layer.clone());
        Ok(layer)
    }

    /// A new sandbox of `image`: its private scratch over the image layer.
    pub(crate) fn scratch(&self, image: &str, id: Uuid) -> std::io::Result<Scratch> {
        Scratch::create(&self.layout, self.layer(image)?, id)
    }

    /// Deletes every image layer and the state directory. Only once no
    /// sandbox is left.
    pub(crate) fn discard_state(&self) {
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
    pub(crate) async fn probe(&self) -> Result<(), String> {
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
    pub(crate) async fn spawn(
        &self,
        scratch: &Scratch,
        spec: &ExecSpec,
    ) -> std::io::Result<Running> {
        self.spawn_in(scratch, spec, None).await
    }

    /// [`Isolation::spawn`], inside `net` (a `network:true` sandbox's own
    /// network) when given; `spec.network` must then be true.
    pub(crate) async fn spawn_in(
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

#[cfg(test)]
mod tests;
