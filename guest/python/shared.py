# sandbox-code-runner: the prelude of both python wrappers (run.py and
# invoke.py). The worker sends `shared.py + <wrapper>` as one `python3 -Ic`
# script, so this is defined once for both; it imports what it uses.


def _as_guest(default_uid, default_gid):
    """Become the guest before any guest code runs. An exec runs as root in
    the VM, and the image's rootfs is shared by every VM of the image: so,
    as root, make sure the worker's own directory (/tmp/.scr) is root's,
    then drop for good to the image's unprivileged user (numeric ids, so an
    image without a passwd entry for them works too; SCR_GUEST_USER=uid:gid
    overrides), who cannot write the image. Then HOME, the caches, pip's
    user site and npm's global prefix live in the guest's own directory
    under the VM's private /tmp (SCR_GUEST_HOME, default /tmp/home), and
    sys.path is what `python3 -c` gives guest code: the cwd first, the user
    site before the system's. Exits 1 rather than run guest code as root.
    (A sandbox whose user namespace maps one id only has no other user to
    become: there the code runs as that one.)"""
    import os
    import site
    import stat
    import sys

    def refuse(why):
        sys.stderr.write("sandbox-code-runner: not running guest code as root: %s\n" % why)
        sys.stderr.flush()
        os._exit(1)

    spec = os.environ.get("SCR_GUEST_USER") or "%d:%d" % (default_uid, default_gid)
    try:
        uid, gid = (int(x) for x in spec.split(":"))
    except ValueError:
        uid = gid = -1
    if uid <= 0 or gid <= 0:
        refuse("SCR_GUEST_USER=%r is not <uid>:<gid> of a user other than root" % spec)
    if os.geteuid() == 0:
        # The worker's files in the VM (prestarted interpreters, handler
        # sources, the SDK archive) are root's; no guest may own their
        # directory (guest code first runs after this).
        own = os.environ.get("SCR_WORKER_DIR") or "/tmp/.scr"
        try:
            os.mkdir(own, 0o755)
            os.chmod(own, 0o755)
        except FileExistsError:
            pass
        except OSError as e:
            refuse("cannot create %s: %s" % (own, e))
        st = os.lstat(own)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            refuse("%s is not a directory only root may change" % own)
        if st.st_mode & 0o005 != 0o005:
            os.chmod(own, 0o755)  # the guest reads handler sources under it
        if not _one_id_only():
            try:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            except OSError as e:
                refuse("cannot become uid %d gid %d: %s" % (uid, gid, e))
            if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups():
                refuse("still uid %r gid %r" % (os.getresuid(), os.getresgid()))
    home = os.environ.get("SCR_GUEST_HOME") or "/tmp/home"
    env = os.environ
    env["HOME"] = home
    env["XDG_CACHE_HOME"] = os.path.join(home, ".cache")
    env["NPM_CONFIG_PREFIX"] = os.path.join(home, ".npm-global")
    path = [p for p in env.get("PATH", "").split(":") if p]
    for bin_dir in (os.path.join(home, ".local", "bin"), os.path.join(home, ".npm-global", "bin")):
        if bin_dir not in path:
            path.append(bin_dir)
    env["PATH"] = ":".join(path)
    try:
        os.makedirs(home, 0o700, exist_ok=True)
    except OSError:
        pass  # the guest's tools say so
    site.ENABLE_USER_SITE = True
    site.USER_BASE = site.USER_SITE = None  # from the new HOME
    user_site = site.getusersitepackages()
    try:
        os.makedirs(user_site, 0o700, exist_ok=True)  # so what pip installs imports at once
    except OSError:
        pass
    if user_site not in sys.path:
        system = set(site.getsitepackages())
        at = next((i for i, p in enumerate(sys.path) if p in system), len(sys.path))
        sys.path.insert(at, user_site)
        site.addsitedir(user_site)  # its .pth files
    if sys.path[:1] != [""]:
        sys.path.insert(0, "")


def _one_id_only():
    """Whether this process's user namespace maps one id only (then no other
    user exists to become)."""
    try:
        with open("/proc/self/uid_map") as f:
            rows = [line.split() for line in f if line.strip()]
    except OSError:
        return False
    return len(rows) == 1 and rows[0][2:] == ["1"]


def _line_buffered_if_streamed():
    """A streamed run's prints reach its caller line by line, as on a
    terminal, not when a block of stdout fills (stderr is line-buffered
    already). The worker says so in SCR_STREAMED (docs/contract.md)."""
    import os
    import sys

    streamed = os.environ.pop("SCR_STREAMED", None) is not None
    try:
        sys.stdout.reconfigure(line_buffering=streamed)
    except (AttributeError, ValueError):
        pass


def _install_iii(default_name):
    """Install builtins.iii: a stand-in for the PyPI iii-sdk client that imports
    the SDK (~0.5 s) and connects only on first real use; repr/str/dir never
    connect. Returns close(timeout) -> bool, True when the client (if any) was
    shut down in time."""
    import builtins
    import os
    import sys
    import threading

    # The worker pip-installs the SDK here (--target); overridable for tests.
    sdk_dir = os.environ.get("SCR_PY_SDK_DIR") or "/tmp/.iii-py"
    surface = ("trigger", "trigger_async", "register_function", "register_trigger",
               "register_trigger_type", "unregister_trigger_type",
               "add_connection_state_listener", "get_connection_state", "shutdown")
    # Two guests must never share a worker name: the engine closes the second.
    name = "%s:%s" % (os.environ.get("SCR_WORKER_NAME") or default_name, os.urandom(3).hex())
    hint = "\n".join((
        "iii: the iii-sdk client (PyPI iii-sdk 0.25), connected lazily on first use",
        "  rows = iii.trigger({'function_id': 'engine::functions::list', 'payload': {}})",
        "  iii.register_function('ns::fn', lambda payload: {'ok': True})  # lives only while this process runs",
        "  methods: " + ", ".join(surface),
    ))
    lock = threading.Lock()
    state = {"client": None, "closed": False}

    def quiet_sdk_logging():
        # The SDK logs through `logging`; keep it on stderr at WARNING even if
        # the user points the root logger at stdout.
        import logging
        for logger_name in ("iii", "iii_helpers", "websockets", "opentelemetry"):
            log = logging.getLogger(logger_name)
            log.propagate = False
            if not log.handlers:
                log.addHandler(logging.StreamHandler(sys.__stderr__))
            log.setLevel(logging.WARNING)

    def client():
        with lock:
            if state["client"] is not None:
                return state["client"]
            if not os.path.isdir(os.path.join(sdk_dir, "iii")):
                raise RuntimeError(
                    "iii-sdk is not installed in this runtime (%s has no iii package: its pip "
                    "install failed or did not run); the iii global cannot connect" % sdk_dir)
            quiet_sdk_logging()
            if sdk_dir not in sys.path:
                sys.path.insert(0, sdk_dir)  # first, so the SDK gets its own pinned deps
            try:
                import iii as sdk
            except Exception as e:
                raise RuntimeError("iii-sdk is not installed in this runtime (importing it from %s "
                                   "failed: %s: %s)" % (sdk_dir, type(e).__name__, e)) from None
            # The SDK drops a marker in ~/.iii/run for a host's `iii ps`; in a VM
            # $HOME may sit on the image's shared rootfs, so skip it.
            core = sys.modules.get("iii.iii")
            if core is not None and hasattr(core, "announce_process"):
                core.announce_process = lambda *args, **kwargs: (lambda: None)
            # III_URL, plus the run's guest-listener token when the worker gave one.
            url = os.environ.get("III_URL") or None
            token = os.environ.get("III_GUEST_TOKEN")
            if url and token:
                if "/" not in url.split("://", 1)[-1]:
                    url += "/"
                url += ("&" if "?" in url else "?") + "token=" + token
            state["client"] = sdk.register_worker(
                url,
                sdk.InitOptions(worker_name=name, otel={"enabled": False},
                                enable_metrics_reporting=False))
            return state["client"]

    def user_shutdown():
        c = state["client"]
        if c is not None and not state["closed"]:
            state["closed"] = True
            c.shutdown()

    class _LazyIII:
        __slots__ = ()

        def __repr__(self):
            if state["client"] is None:
                return hint
            return "<iii: iii-sdk client, worker %s>" % name

        __str__ = __repr__

        def __dir__(self):
            c = state["client"]
            if c is None:
                return list(surface)
            return sorted(n for n in dir(c) if not n.startswith("_") and callable(getattr(type(c), n, None)))

        def __getattr__(self, attr):
            # Dunder/private probes (copy, pickle, IPython, hasattr) never connect.
            if attr.startswith("_"):
                raise AttributeError(attr)
            if attr == "shutdown":
                return user_shutdown
            return getattr(client(), attr)

    builtins.iii = _LazyIII()

    def close(timeout):
        c = state["client"]
        if c is None or state["closed"]:
            return True
        state["closed"] = True

        def shutdown():
            try:
                c.shutdown()
            except Exception:
                pass
        # The SDK's event-loop thread is not a daemon: a shutdown that hangs
        # would hang the interpreter's exit, so bound it and report.
        t = threading.Thread(target=shutdown, name="iii-close", daemon=True)
        t.start()
        t.join(timeout)
        return not t.is_alive()

    return close
