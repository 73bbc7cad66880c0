//! Namespaced sandboxes: the double's stand-in for a microVM, booted once
//! per sandbox and kept running until it stops.
//!
//! Each sandbox owns a host scratch directory that serves as its root
//! (hakoniwa `rootdir` + `Runctl::RootdirRW`). Over it go its image's rootfs
//! directories (`/usr`, `/etc`, `/opt`, `/root`, `/var`...: overlays of the
//! host's directories and the image's one shared writable layer, see
//! `image_layer`), a fresh devfs at `/dev` and a procfs at `/proc`. Writes
//! into the image rootfs are seen by every sandbox of the image, as on the
//! daemon; the host's files are never touched. Files a guest writes anywhere
//! else (`/tmp/x`, `/run/x`, `/newdir/f`) land in the scratch directory:
//! they persist across that sandbox's execs, no other sandbox sees them, and
//! they vanish when it stops.
//!
//! At `sandbox::create` the sandbox boots: one mount, user and PID namespace
//! (and network namespace: the sandbox's own behind slirp4netns for
//! `network:true`, a private one with only loopback otherwise) with its
//! mounts in place, and in it PID 1, the double's small init
//! (`scr-guest-init`, see `isolation/vm`). As host root the user namespace
//! maps a range of ids, so guest root can become the images' users (see
//! `users`). Every exec is a child of that
//! init, as on the daemon, so an exec costs a process start, not a new
//! container. When PID 1 dies the kernel kills everything left in the
//! namespace, so SIGKILLing it stops the sandbox, and by the time hakoniwa's
//! reaper (the namespaces' parent) has exited, nothing of it remains.
//!
//! hakoniwa forks, and marks its first child with PDEATHSIG=SIGKILL, which
//! the kernel ties to the forking *thread*. All boots therefore happen on
//! one long-lived spawner thread; when it ends (the double is dropped), any
//! sandbox still alive is killed.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hakoniwa::{Container, MountOptions, Namespace, Runctl, Stdio};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use super::image_layer::{ExecWorkdirs, ImageLayer};
use super::network::GuestNet;
use super::users::{self, Mapping};

mod process;
mod scratch;
mod vm;
pub(crate) use process::*;
pub(crate) use scratch::{HostLayout, Scratch};
pub(crate) use vm::GuestVm;

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

/// Exit status of a sandbox whose init binary could not be exec'd.
const INIT_FAILURE: i32 = 125;

type SpawnReply = oneshot::Sender<hakoniwa::Result<hakoniwa::Child>>;
/// A command, the sandbox network it joins (if any), and where to answer.
type SpawnJob = (hakoniwa::Command, Option<Arc<GuestNet>>, SpawnReply);

/// Boots sandboxes from one long-lived thread (see module docs).
pub(crate) struct Isolation {
    layout: HostLayout,
    /// The double's own state: `<temp>/scr-double-<uuid>/<image>/...`.
    state: PathBuf,
    /// The init binary, copied into each sandbox's root at boot.
    init_binary: PathBuf,
    /// One shared writable layer per image, created on first use.
    layers: Mutex<std::collections::HashMap<String, Arc<ImageLayer>>>,
    /// How sandboxes map ids: a range as host root, unless the probe found
    /// that this host refuses it.
    mapping: Mutex<Mapping>,
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
        let init_binary = state.join("scr-guest-init");
        write_executable(&init_binary, vm::GUEST_INIT)
            .map_err(|e| format!("cannot write the sandbox init binary: {e}"))?;
        Ok(Isolation {
            layout,
            state,
            init_binary,
            layers: Mutex::new(std::collections::HashMap::new()),
            mapping: Mutex::new(Mapping::for_host()),
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
        if let Err(e) = super::presets::apply(image, &layer, self.mapping()) {
            tracing::warn!(image, error = %e, "the {image} image lacks some of its preset's contents");
        }
        layers.insert(image.to_string(), layer.clone());
        Ok(layer)
    }

    /// How this double's sandboxes map ids.
    pub(crate) fn mapping(&self) -> Mapping {
        *self.mapping.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Proves that sandboxes work on this host (see [`Isolation::probe_once`]).
    /// A root double whose sandboxes cannot map a range of ids falls back to
    /// one id, guest root, and says so (`users::unmodelled`).
    pub(crate) async fn probe(&self) -> Result<(), String> {
        match self.probe_once().await {
            Err(e) if self.mapping() == Mapping::Range => {
                tracing::warn!(
                    error = %e,
                    "sandboxes cannot map a range of uids on this host: guest code cannot become \
                     another user than root (as the daemon's VMs let it)"
                );
                *self.mapping.lock().unwrap_or_else(|p| p.into_inner()) = Mapping::Single;
                users::range_failed();
                self.probe_once().await
            }
            other => other,
        }
    }

    /// Proves that a sandboxed process really runs in its own root: it
    /// writes `/tmp/<marker>`, which must land in a scratch directory and
    /// not in the host's /tmp, and its parent must be PID 1 (the sandbox's
    /// init); with [`Mapping::Range`], its user namespace has the images'
    /// uid 1000. Any failure means isolation is unavailable and the double
    /// must not start.
    async fn probe_once(&self) -> Result<(), String> {
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
        };
        let mut vms = Vec::new();
        let result = async {
            let vm = self
                .boot(&scratch, true, None)
                .await
                .map_err(|e| format!("cannot boot a namespaced sandbox: {e}"))?;
            let running = vm
                .spawn(&spec)
                .map_err(|e| format!("cannot spawn a namespaced process: {e}"))?;
            vms.push(vm);
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
                    "the guest program's parent is pid {stdout:?}, not the sandbox's init"
                ));
            }
            if self.mapping() == Mapping::Range {
                let ids = ExecSpec {
                    argv: vec![
                        "sh".into(),
                        "-c".into(),
                        "while read -r a b c; do echo \"$a $c\"; done </proc/self/uid_map".into(),
                    ],
                    ..spec.clone()
                };
                let running = vms[0]
                    .spawn(&ids)
                    .map_err(|e| format!("cannot spawn a namespaced process: {e}"))?;
                let outcome = tokio::time::timeout(Duration::from_secs(20), running.outcome())
                    .await
                    .map_err(|_| "reading the sandbox's uid map did not finish in 20 s")?;
                let map = String::from_utf8_lossy(&outcome.stdout).to_string();
                if !maps_id(&map, 1000) {
                    return Err(format!("the sandbox's uid map lacks uid 1000: {map:?}"));
                }
            }
            // `network:false` sandboxes need a private network namespace.
            let offline = ExecSpec {
                argv: vec!["sh".into(), "-c".into(), "exit 0".into()],
                ..spec.clone()
            };
            let vm = self
                .boot(&scratch, false, None)
                .await
                .map_err(|e| format!("cannot boot into a private network namespace: {e}"))?;
            let running = vm
                .spawn(&offline)
                .map_err(|e| format!("cannot spawn into a private network namespace: {e}"))?;
            vms.push(vm);
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
        for vm in &vms {
            vm.kill_and_wait(Duration::from_secs(5)).await;
        }
        let _ = scratch.remove();
        let _ = layer.remove();
        result.map_err(|e| {
            format!("namespace isolation (user namespaces with overlayfs) is unavailable on this host: {e}")
        })
    }

    /// Boots `scratch`'s sandbox: its namespaces and mounts, and its init,
    /// inside `net` (a `network:true` sandbox's own network) when given,
    /// the host's network for `network` without one (no slirp4netns), or a
    /// private network with only loopback.
    pub(crate) async fn boot(
        &self,
        scratch: &Scratch,
        network: bool,
        net: Option<Arc<GuestNet>>,
    ) -> std::io::Result<GuestVm> {
        let layer = scratch.view().shared_layer();
        let seen = layer.generation();
        let workdirs = layer.workdirs()?;
        let mapping = self.mapping();
        let booted = async {
            std::fs::copy(
                &self.init_binary,
                scratch.path().join(&vm::GUEST_INIT_PATH[1..]),
            )?;
            let (ours, theirs) = UnixStream::pair()?;
            let mut cmd = self.command(scratch, network, &workdirs, mapping)?;
            let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
            cmd.current_dir("/")
                .stdin(Stdio::from(OwnedFd::from(theirs)))
                .stdout(Stdio::from(null))
                .stderr(Stdio::inherit());
            let (tx, rx) = oneshot::channel();
            {
                let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
                match jobs.as_ref() {
                    None => return Err(std::io::Error::other("the double is shutting down")),
                    Some(jobs) => jobs
                        .send((cmd, net, tx))
                        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?,
                }
            }
            let mut child = rx
                .await
                .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            if mapping == Mapping::Range {
                let outer = child.id() as libc::pid_t;
                let wire = ours.try_clone()?;
                let mapped = tokio::task::spawn_blocking(move || {
                    let r = users::map_from_host(&wire, || init_pid(outer));
                    if r.is_err() {
                        // Its init exits at the wire's end (or dies with
                        // the reaper): nothing of it is left behind.
                        let _ = wire.shutdown(std::net::Shutdown::Both);
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                    r.map(|()| child)
                })
                .await
                .map_err(std::io::Error::other)?;
                child = mapped?;
            }
            Ok((child, ours))
        }
        .await;
        match booted {
            Ok((child, ours)) => {
                let vm = GuestVm::adopt(child, ours, layer, seen, workdirs)?;
                if let Some(pid) = vm.init_pid() {
                    scratch
                        .view()
                        .booted(PathBuf::from(format!("/proc/{pid}/root")));
                }
                Ok(vm)
            }
            Err(e) => {
                workdirs.remove();
                Err(e)
            }
        }
    }

    /// The hakoniwa command of a sandbox: namespaces, mounts, and a closure
    /// that execs the init (entering a user namespace `mapping` says).
    fn command(
        &self,
        scratch: &Scratch,
        network: bool,
        workdirs: &ExecWorkdirs,
        mapping: Mapping,
    ) -> std::io::Result<hakoniwa::Command> {
        let program = CString::new(vm::GUEST_INIT_PATH).map_err(std::io::Error::other)?;
        let shm = CString::new("/dev/shm").map_err(std::io::Error::other)?;
        let mut container = match mapping {
            // Hakoniwa's user namespace maps one id; the init's closure
            // enters one with a range instead (see `users`).
            Mapping::Range => {
                let mut c = Container::empty();
                c.unshare(Namespace::Mount)
                    .unshare(Namespace::Pid)
                    .procfsmount("/proc");
                c
            }
            Mapping::Single => Container::new(),
        };
        let range = mapping == Mapping::Range;
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
                // the sandbox's user namespace; `volatile`: the layer is
                // scratch, so unmounting need not sync it to disk.
                Some(lower) => {
                    let data = format!(
                        "lowerdir={},upperdir={upper},workdir={},userxattr,volatile",
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
        if !network {
            container.unshare(Namespace::Network);
        }

        let init = move || -> i32 {
            if !network {
                loopback_up();
            }
            // The daemon's /dev/shm is a tmpfs every guest user may use.
            // SAFETY: chmod of a NUL-terminated path.
            unsafe { libc::chmod(shm.as_ptr(), 0o1777) };
            if range && !users::enter_in_init() {
                return INIT_FAILURE;
            }
            let argv = [program.as_ptr(), program.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: NUL-terminated strings and null-terminated arrays that
            // outlive the call; on success it does not return.
            unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            INIT_FAILURE
        };
        // SAFETY: the closure runs in the namespace's PID 1 after fork, in a
        // single-threaded process. It only calls async-signal-safe libc
        // functions (socket, ioctl, close, chmod, unshare, read, write,
        // setgroups, execve).
        let cmd = unsafe { container.command_from_closure(init) };
        Ok(cmd)
    }
}

/// Whether a `/proc/<pid>/uid_map` (as `<inside> <count>` lines) maps `id`.
fn maps_id(map: &str, id: u64) -> bool {
    map.lines().any(|l| {
        let mut f = l.split_whitespace().map(|n| n.parse::<u64>().ok());
        matches!((f.next(), f.next()), (Some(Some(a)), Some(Some(c))) if a <= id && id < a + c)
    })
}

/// Writes `bytes` to a new file at `path`, mode 0755.
fn write_executable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(path)?;
    f.write_all(bytes)
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
