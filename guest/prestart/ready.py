# sandbox-code-runner: the pre-started python interpreter (see relay.sh), a
# fork server.
# argv: python3 -c <this file> <dir>   (cwd /tmp; fds 3/1/2/4 are <dir>'s
# in/out/err/life FIFOs, opened read-write by the spawner; stdin /dev/null)
# It imports what the wrappers use and the iii SDK module (when it is
# planted), connects nothing, holds no token, and never runs a call itself:
# for each relay pid that arrives on fd 3 (scr_relay_fork) it forks a child
# and goes back to waiting. So every call gets a fresh process, with nothing
# of any earlier call in it, without paying the interpreter's start or the
# SDK's import.
# The child, in its own process group, reads the request from that relay's
# stdin (through /proc/<pid>/fd/6):
#   {"script": <a wrapper, as for python3 -c>, "env": {..}, "stdin": <n bytes>}\n<n bytes>
# takes the relay's stdout and stderr (/proc/<pid>/fd/7, 8) as its fds 1
# and 2, and runs the script as `python3 -c` would in a fresh process: its
# stdin is those bytes, its env the VM's plus the request's, sys.argv ["-c"].
# It writes <dir>/child.<pid> (its pid), taken.<pid>, and status.<pid> (its
# exit code); its exit closes the `life` FIFO the relay opened, which the
# server replaces for the next call.


def _ready():
    import atexit
    import builtins
    import os
    import signal
    import sys

    # What every wrapper imports, loaded while nobody waits.
    import importlib.util  # noqa: F401
    import inspect  # noqa: F401
    import json
    import re  # noqa: F401
    import threading
    import traceback
    import types  # noqa: F401

    d = sys.argv[1]
    sdk_dir = os.environ.get("SCR_PY_SDK_DIR") or "/tmp/.iii-py"
    if os.path.isdir(os.path.join(sdk_dir, "iii")):
        sys.path.insert(0, sdk_dir)
        try:
            import logging
            for name in ("iii", "iii_helpers", "websockets", "opentelemetry"):
                logging.getLogger(name).propagate = False
            import iii  # noqa: F401  (imported, not connected)
        except Exception:
            pass  # the wrapper's `iii` explains on first use
        finally:
            sys.path.remove(sdk_dir)  # the wrapper puts it back when it is used

    life = os.path.join(d, "life")
    os.set_inheritable(4, False)  # `life` ends with the call, not with its children
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped for us
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = os.read(3, 64)
            if not chunk:
                os._exit(97)
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        try:
            relay = int(line.strip())
        except ValueError:
            continue
        if os.fork() == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setpgid(0, 0)  # the relay's deadline kills this call's group only
            os.close(3)
            _call(d, relay, atexit, builtins, json, os, sys, threading, traceback)
        # The child holds this call's `life`; the next call gets a new one,
        # swapped in under the same name at once.
        fresh = os.path.join(d, "life.next")
        try:
            os.unlink(fresh)
        except FileNotFoundError:
            pass
        os.mkfifo(fresh)
        fd = os.open(fresh, os.O_RDWR)
        os.dup2(fd, 4, inheritable=False)
        os.close(fd)
        os.rename(fresh, life)


def _call(d, relay, atexit, builtins, json, os, sys, threading, traceback):
    tag = "." + str(relay)
    with open(os.path.join(d, "child" + tag), "w") as f:
        f.write(str(os.getpid()))
    # The relay keeps this exec's stdin, stdout and stderr on its fds 6-8.
    with open("/proc/%d/fd/6" % relay, "rb") as f:
        buf = f.read()
    head, data = buf.split(b"\n", 1)
    del buf
    req = json.loads(head)
    data = data[:int(req["stdin"])]
    open(os.path.join(d, "taken" + tag), "w").close()
    for fd, held in ((1, 7), (2, 8)):
        new = os.open("/proc/%d/fd/%d" % (relay, held), os.O_WRONLY)
        os.dup2(new, fd)
        os.close(new)

    os.environ.update(req.get("env") or {})
    stdin = os.memfd_create("stdin")
    view = memoryview(data)
    while view:
        view = view[os.write(stdin, view):]
    os.lseek(stdin, 0, 0)
    os.dup2(stdin, 0)
    os.close(stdin)
    del data, view

    status = os.path.join(d, "status" + tag)
    real_exit = os._exit

    def report(code):
        try:
            with open(status, "w") as f:
                f.write(str(code & 0xFF))
        except Exception:
            pass

    def _exit(code):
        report(code)
        real_exit(code)

    os._exit = _exit
    sys.argv[:] = ["-c"]
    script = compile(req["script"], "<string>", "exec", dont_inherit=True)
    del req
    main = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None,
            "__spec__": None, "__loader__": None, "__package__": None}
    hooks = atexit._ncallbacks()
    try:
        exec(script, main)
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            sys.stderr.write("%s\n" % (e.code,))
            code = 1
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__)
        code = 1
    report(code)
    if threading.active_count() == 1 and atexit._ncallbacks() == hooks:
        # Nothing is left for the interpreter's own exit to wait for or run:
        # skip tearing down the modules loaded ahead.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        real_exit(code & 0xFF)
    sys.exit(code)


_ready()
