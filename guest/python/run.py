# sandbox-code-runner: python RUN wrapper.
# argv: python3 -c <this file>   (cwd /tmp)
# stdin: the user's code, verbatim.  env: III_URL, SCR_WORKER_NAME.
# The code runs as the script `main.py` in a fresh __main__ module: its
# stdout/stderr are its own, sys.exit(n) exits n, and an uncaught exception
# prints the usual traceback (without this wrapper's frames) and exits 1.


# ---- BEGIN shared (identical in run.py and invoke.py; guest/tests checks) ----
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
            state["client"] = sdk.register_worker(
                os.environ.get("III_URL") or None,
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
# ---- END shared ----


class _MainSource:
    """__loader__ of main.py: traceback and inspect fetch its source lines
    through get_source (linecache.lazycache), as there is no file on disk."""

    def __init__(self, text):
        self._text = text

    def get_source(self, name):
        return self._text


def _main():
    import builtins
    import os
    import sys
    import types

    data = sys.stdin.buffer.read()
    close_iii = _install_iii("sandbox-code-runner:run")
    filename = "main.py"
    try:
        source = data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        sys.stderr.write("main.py is not valid UTF-8: %s\n" % e)
        sys.exit(1)
    del data

    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=filename, __builtins__=builtins, __spec__=None,
                         __loader__=_MainSource(source))
    sys.modules["__main__"] = main
    sys.argv[:] = [filename]

    rc, exit_exc = 0, None
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as e:
        exit_exc = e
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next  # this wrapper's own frames
        e.__traceback__ = tb
        if sys.excepthook is sys.__excepthook__:
            # The builtin hook reads source lines from disk, where main.py is
            # not; traceback's printer reads them from linecache.
            import traceback
            traceback.print_exception(type(e), e, tb)
        else:
            sys.excepthook(type(e), e, tb)
        rc = 1

    if not close_iii(2.0):
        # The client did not shut down in time: leave without waiting for it.
        if exit_exc is not None:
            code = exit_exc.code
            if code is None:
                rc = 0
            elif isinstance(code, int):
                rc = code & 0xFF
            else:
                sys.stderr.write("%s\n" % (code,))
                rc = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(rc)
    if exit_exc is not None:
        raise exit_exc  # Python reports it exactly as for a plain script
    sys.exit(rc)


_main()
