# sandbox-code-runner: a session's python interpreter (see turn.sh).
# argv: python3 -Ic <shared.py + run.py's definitions + this file> <dir>,
# started as the guest user, cwd /tmp, fds 3 and 4 the session's `in` and
# `life` FIFOs (read-write), stdout /dev/null, stderr <dir>/boot.err.
# Each run is one turn: its code runs as `main.py` in the one __main__
# namespace this process keeps, as successive cells of a notebook do; only
# `result` is cleared first. An uncaught exception prints its traceback and
# gives 1, sys.exit(n) gives n, and the session goes on. The run's env (its
# guest token among it) is the process's for that turn only, and `iii` is a
# fresh lazy client each turn (the one a turn connected is closed at its
# end, with its token). What guest code leaves running between turns
# (threads) keeps running; its output goes nowhere.


def _session():
    import os
    import sys

    _as_guest(1000, 100)  # already the guest: HOME, caches and sys.path
    d = sys.argv[1]
    base_env = dict(os.environ)
    base_env.pop("SCR_TURN", None)
    main = _new_main("main.py")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 2)  # boot is over: nothing goes to boot.err from here on
    for fd in (3, 4):
        os.set_inheritable(fd, False)  # what a turn starts holds neither
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = os.read(3, 64)
            if not chunk:
                os._exit(0)
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        try:
            relay = int(line)
        except ValueError:
            continue
        _turn(d, relay, main.__dict__, base_env, devnull)
        try:
            os.write(4, b"done %d\n" % relay)
        except OSError:
            pass


def _turn(d, relay, ns, base_env, devnull):
    import json
    import os
    import sys

    try:
        with open("/proc/%d/fd/6" % relay, "rb") as f:
            buf = f.read()
        head, data = buf.split(b"\n", 1)
        req = json.loads(head)
        data = data[:int(req["stdin"])]
        env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
        status = os.open(os.path.join(d, "status.%d" % relay),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        outs = [os.open("/proc/%d/fd/%d" % (relay, n), os.O_WRONLY) for n in (7, 8)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # nothing ran and no status says so: the relay says `lost`
    del buf
    os.write(status, b"137")  # taken: from here on the run counts as run
    for fd, new in zip((1, 2), outs):
        os.dup2(new, fd)
        os.close(new)
    os.dup2(devnull, 0)
    os.environ.clear()
    os.environ.update(base_env)
    os.environ.update(env)
    secret = os.environ.pop("SCR_RESULT_SECRET", None)
    limit = int(os.environ.pop("SCR_RESULT_MAX", "0") or 0)
    _line_buffered_if_streamed()
    close_iii = _install_iii("sandbox-code-runner:run")
    source = _decode_source(data, "main.py")
    del data
    if source is None:
        rc = 1
    else:
        ns.pop("result", None)
        rc, exit_exc = _run_source(ns, source, "main.py", secret, limit)
        rc = _exit_status(exit_exc, rc)
    close_iii(2.0)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        os.ftruncate(status, 0)
        os.pwrite(status, str(rc).encode(), 0)
    finally:
        os.close(status)


_session()
