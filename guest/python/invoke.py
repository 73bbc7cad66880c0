# sandbox-code-runner: python HANDLER wrapper (one call of a registered
# function, or registration-time validation).
# argv: python3 -Ic <this file>   (cwd /tmp)
# stdin: {"secret":"<32 hex>","mode":"call"|"check","module":"/tmp/.scr/fn/<name>.py","payload":<any>}
# env: III_URL, SCR_WORKER_NAME.
# stdout carries exactly one line, written last:
#   \x1eSCR1 <secret> ok <json>\n   or   \x1eSCR1 <secret> err {"type","message","stack"?}\n
# Everything the handler prints, subprocesses included, goes to stderr. The
# handler never sees the secret, so what it prints cannot pass for the frame.


# (the shared prelude, guest/python/shared.py, is prepended to this file by the worker)


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
    _as_guest(1000, 100)  # the python image's python-user (group users)
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
