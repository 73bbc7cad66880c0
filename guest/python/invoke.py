# sandbox-code-runner: python HANDLER wrapper (one call of a registered
# function, or registration-time validation).
# argv: python3 -c <this file>   (cwd /tmp)
# stdin: {"secret":"<32 hex>","mode":"call"|"check","module":"/tmp/.scr/fn/<name>.py","payload":<any>}
# env: III_URL, SCR_WORKER_NAME.
# stdout carries exactly one line, written last:
#   \x1eSCR1 <secret> ok <json>\n   or   \x1eSCR1 <secret> err {"type","message","stack"?}\n
# Everything the handler prints, subprocesses included, goes to stderr. The
# handler never sees the secret, so what it prints cannot pass for the frame.


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


def _frame_writer(secret):
    """Duplicate the original stdout before anything can touch it; the secret
    lives only in this closure. Returns emit(kind, json_text)."""
    import os
    fd = os.dup(1)  # not inherited by subprocesses (O_CLOEXEC)
    prefix = ("\x1eSCR1 %s " % secret).encode("ascii")
    write = os.write
    sent = []

    def emit(kind, json_text):
        if sent:
            return
        sent.append(kind)
        view = memoryview(prefix + kind.encode("ascii") + b" " + json_text.encode("utf-8") + b"\n")
        while view:
            view = view[write(fd, view):]

    return emit


def _main():
    import importlib.util
    import inspect
    import json
    import os
    import re
    import sys
    import traceback

    max_text = 16 * 1024  # cap on an error's message/stack in the frame

    try:
        req = json.loads(sys.stdin.buffer.read())
        secret, path = req["secret"], req["module"]
        if not (isinstance(secret, str) and re.fullmatch("[0-9a-f]{32}", secret) and isinstance(path, str)):
            raise ValueError("bad secret or module")
    except Exception as e:
        sys.stderr.write("sandbox-code-runner invoke wrapper: stdin is not the expected JSON request: %s\n" % e)
        sys.exit(2)
    emit = _frame_writer(secret)
    mode, payload = req.get("mode"), req.get("payload")
    del req, secret

    # fd 1 becomes stderr: print, sys.stdout, os.write(1) and child processes
    # all land there. The frame goes to the fd duplicated above.
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def clip(text):
        return text if len(text) <= max_text else text[:max_text] + "...[truncated]"

    def error(kind, e):
        tb = e.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename == "<string>"
                                  or tb.tb_frame.f_code.co_filename.startswith("<frozen importlib")):
            tb = tb.tb_next  # this wrapper's and the import machinery's frames
        return {"type": kind, "message": clip("%s: %s" % (type(e).__name__, e)),
                "stack": clip("".join(traceback.format_exception(type(e), e, tb)))}

    def is_async(fn):
        return (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
                or inspect.iscoroutinefunction(getattr(fn, "__call__", None)))

    async_msg = ("handler is async: sandbox-code-runner calls python handlers synchronously; "
                 "define `def handler(payload)` (use iii.trigger, not trigger_async)")
    close_iii = _install_iii("sandbox-code-runner:fn")
    result = None
    try:
        spec = importlib.util.spec_from_file_location("scr_handler", path)
        if spec is None:
            raise ImportError("cannot load %s as a python module" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["scr_handler"] = module  # dataclasses/pickle look classes up here
        spec.loader.exec_module(module)
    except BaseException as e:
        result = ("err", error("load_error", e))
    else:
        handler = module.__dict__.get("handler")
        if not callable(handler):
            result = ("err", {"type": "no_handler", "message": "the module defines no callable `handler`: "
                              "define `def handler(payload)` returning JSON-serializable data"})
        elif is_async(handler):
            result = ("err", {"type": "async_handler", "message": async_msg})
        elif mode == "check":
            result = ("ok", "null")
    if result is None:
        try:
            value = handler(payload)
        except BaseException as e:
            result = ("err", error("throw", e))
        else:
            if inspect.isawaitable(value):
                getattr(value, "close", lambda: None)()  # no "never awaited" warning
                result = ("err", {"type": "async_handler", "message": async_msg})
            else:
                try:
                    text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
                    text.encode("utf-8")  # lone surrogates cannot travel
                    result = ("ok", text)
                except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as e:
                    result = ("err", {"type": "not_json", "message": clip(
                        "the handler returned a value that is not JSON-serializable: %s: %s"
                        % (type(e).__name__, e))})
    close_iii(2.0)
    for stream in (sys.__stdout__, sys.stdout, sys.stderr):  # os._exit skips flushing
        try:
            stream.flush()
        except Exception:
            pass
    emit(result[0], result[1] if result[0] == "ok" else json.dumps(result[1], separators=(",", ":")))
    # The call is answered: leftover threads (the handler's) must not keep it alive.
    os._exit(0)


_main()
