# sandbox-code-runner: the prelude of both python wrappers (run.py and
# invoke.py). The worker sends `shared.py + <wrapper>` as one `python3 -c`
# script, so this is defined once for both; it imports what it uses.

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
