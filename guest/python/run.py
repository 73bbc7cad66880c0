# sandbox-code-runner: python RUN wrapper.
# argv: python3 -Ic <this file>   (cwd /tmp)
# stdin: the user's code, verbatim.  env: III_URL, SCR_WORKER_NAME.
# The code runs as the script `main.py` in a fresh __main__ module: its
# stdout/stderr are its own, sys.exit(n) exits n, and an uncaught exception
# prints the usual traceback (without this wrapper's frames) and exits 1.


# (the shared prelude, guest/python/shared.py, is prepended to this file by the worker)


class _MainSource:
    """__loader__ of main.py: traceback and inspect fetch its source lines
    through get_source (linecache.lazycache), as there is no file on disk."""

    def __init__(self, text):
        self._text = text

    def get_source(self, name):
        return self._text


def _main():
    _as_guest(1000, 100)  # the python image's python-user (group users)
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
