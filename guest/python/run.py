# sandbox-code-runner: python RUN wrapper.
# argv: python3 -Ic <this file>   (cwd /tmp)
# stdin: the user's code, verbatim.  env: III_URL, SCR_WORKER_NAME,
# SCR_RESULT_SECRET and SCR_RESULT_MAX (read and removed before the code runs).
# The code runs as the script `main.py` in a fresh __main__ module: its
# stdout/stderr are its own, sys.exit(n) exits n, and an uncaught exception
# prints the usual traceback (without this wrapper's frames) and exits 1.
# What the module assigned to `result` is the run's `result`: on a normal
# end the last stdout line is the result frame
# (`\n\x1eSCR1 <secret> result <json>`), which the worker takes off.


# (the shared prelude, guest/python/shared.py, is prepended to this file by the worker)


class _MainSource:
    """__loader__ of main.py: traceback and inspect fetch its source lines
    through get_source (linecache.lazycache), as there is no file on disk."""

    def __init__(self, text):
        self._text = text

    def get_source(self, name):
        return self._text


def _result_frame(secret, limit, value, json):
    """The result frame's bytes: the value as JSON (null when JSON cannot
    represent it); past `limit` bytes only its size and shape."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = "null"
    kind, body = "result", text
    size = len(text.encode("utf-8"))
    if limit > 0 and size > limit:
        shape = {"bytes": size}
        if isinstance(value, (list, tuple)):
            shape["array"] = len(value)
        elif isinstance(value, dict):
            shape["object"] = len(value)
        elif isinstance(value, str):
            shape["string"] = len(value)
        kind, body = "result_omitted", json.dumps(shape)
    return ("\n\x1eSCR1 %s %s %s\n" % (secret, kind, body)).encode("utf-8")



def _run_source(ns, source, filename, secret, limit):
    """Runs `source` in the module dict `ns` as a script would run: an
    uncaught exception prints the usual traceback (without this wrapper's
    frames) and gives 1, sys.exit is returned for the caller to honour. On a
    normal end the result frame follows on stdout. Returns (rc, SystemExit
    or None). A session (guest/session/session.py) runs each of its runs
    through this, in the one namespace it keeps."""
    import json
    import os
    import sys

    ns["__loader__"] = _MainSource(source)
    rc, exit_exc = 0, None
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), ns)
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

    ended_well = rc == 0 and (exit_exc is None or exit_exc.code in (None, 0))
    if secret and ended_well:
        frame = _result_frame(secret, limit, ns.get("result"), json)
        try:
            sys.stdout.flush()
            while frame:
                frame = frame[os.write(1, frame):]
        except Exception:
            pass  # stdout is gone: there is nobody to tell
    return rc, exit_exc


def _new_main(filename):
    """A fresh __main__ module for `filename`, installed as a script's is
    (sys.modules, sys.argv)."""
    import builtins
    import sys
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=filename, __builtins__=builtins, __spec__=None)
    sys.modules["__main__"] = main
    sys.argv[:] = [filename]
    return main


def _decode_source(data, filename):
    """The code's text (a leading BOM dropped), or None once stderr says
    why it is not UTF-8."""
    import sys

    try:
        return data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        sys.stderr.write("%s is not valid UTF-8: %s\n" % (filename, e))
        return None


def _exit_status(exit_exc, rc):
    """The exit code of a script that ended with `rc`, or with `exit_exc`
    (sys.exit's SystemExit), as Python gives it: a code that is no integer
    is printed and gives 1."""
    import sys

    if exit_exc is None:
        return rc
    code = exit_exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write("%s\n" % (code,))
    return 1


def _main():
    _as_guest(1000, 100)  # the python image's python-user (group users)
    import os
    import sys

    secret = os.environ.pop("SCR_RESULT_SECRET", None)
    limit = int(os.environ.pop("SCR_RESULT_MAX", "0") or 0)
    _line_buffered_if_streamed()

    data = sys.stdin.buffer.read()
    close_iii = _install_iii("sandbox-code-runner:run")
    filename = "main.py"
    source = _decode_source(data, filename)
    if source is None:
        sys.exit(1)
    del data

    main = _new_main(filename)
    rc, exit_exc = _run_source(main.__dict__, source, filename, secret, limit)

    if not close_iii(2.0):
        # The client did not shut down in time: leave without waiting for it.
        rc = _exit_status(exit_exc, rc)
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
