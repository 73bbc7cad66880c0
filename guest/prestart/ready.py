# sandbox-code-runner: the pre-started python interpreter (see relay.sh), a
# fork server.
# argv: python3 -Ic <this file> <dir>   (cwd /tmp; fds 3 and 4 are <dir>'s
# in and life FIFOs, opened read-write by the spawner; stdin, stdout and
# stderr /dev/null)
# The worker prepends `_WRAPPERS = [<wrapper source>, ...]`: the wrappers a
# call may run. The server imports what they use and the iii SDK module
# (when it is planted), and runs each wrapper's definitions (everything but
# its last line, `_main()`), then writes <dir>/warm; it connects nothing,
# holds no token, and never runs a call itself. For each request line `<relay pid> <budget ms>` that
# arrives on fd 3 (relay_fork.sh) it forks a child and waits for it, up to
# the budget. So every call gets a fresh process, with nothing of any
# earlier call in it, without paying the interpreter's start, the SDK's
# import or the wrapper's compile.
# The child, in its own process group, reads the request from that relay's
# stdin (through /proc/<pid>/fd/6):
#   {"script": <a wrapper, as for python3 -c>, "env": {..}, "stdin": <n bytes>}\n<n bytes>
# takes the relay's stdout and stderr (/proc/<pid>/fd/7, 8) as its fds 1
# and 2, and runs the script as `python3 -Ic` would in a fresh process:
# its stdin is those bytes, its env the VM's plus the request's, sys.argv
# ["-c"]. The server and the child until then are root (the exec's user);
# the script's wrapper drops to the guest user before any guest code.
# <dir>/status.<pid> says how the call ended: the child writes 137 once it
# has the request and its exit code when it exits; the server then writes
# what the child's wait status says, or `timeout` (after killing the call's
# process group at the budget). The relay reads it once the `life` FIFO it
# opened has no writer left: the server holds this call's `life` until it
# has written the status, and has swapped a fresh one in for the next call.


def _ready(wrappers):
    import atexit
    import builtins
    import gc
    import os
    import select
    import signal
    import sys
    import time

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
    # The server runs as root (python3 -I: nothing from the cwd or a user
    # site); guest code runs in its children as another user, after their
    # drop. So it imports the SDK ahead only from a tree no guest could
    # have made or changed.
    if _owned_by_me(os, sdk_dir) and os.path.isdir(os.path.join(sdk_dir, "iii")):
        sys.path.insert(0, sdk_dir)
        try:
            import logging
            for name in ("iii", "iii_helpers", "websockets", "opentelemetry"):
                logging.getLogger(name).propagate = False
            import iii  # noqa: F401  (imported, not connected)
            import asyncio  # noqa: F401
            import websockets.asyncio.client  # noqa: F401  (what connecting loads)
        except Exception:
            pass  # the wrapper's `iii` explains on first use
        finally:
            sys.path.remove(sdk_dir)  # the wrapper puts it back when it is used

    # Each wrapper's definitions, run ahead: a call only runs its `_main()`.
    loaded = {}
    for text in wrappers:
        head, _, last = text.rstrip().rpartition("\n")
        if last != "_main()":
            continue
        try:
            code = compile(head, "<string>", "exec", dont_inherit=True)
            ns = _fresh_globals(builtins)
            exec(code, ns)
            loaded[text] = ns
        except Exception:
            pass  # that wrapper runs from its text
    # What is loaded now stays out of the collector's way: a child's
    # collections never walk (and so never copy) the server's pages.
    gc.collect()
    gc.freeze()
    # All it loads ahead is loaded: `warm`, as a node interpreter says it
    # (nothing waits on it here; a call that came sooner waited on `in`).
    open(os.path.join(d, "warm"), "w").close()

    life = os.path.join(d, "life")
    os.set_inheritable(4, False)  # `life` ends with the call, not with its children
    lives, alive = os.pipe()  # its end is the server's: waiting children go too
    last = None
    while True:
        # The next call's child, forked now (off the call's path): it waits
        # on `in` holding this generation's `life`; so does the server,
        # until that call's status is written.
        says_r, says_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(says_r)
            os.close(alive)
            os.setpgid(0, 0)  # the deadline kills this call's group only
            _child(d, says_w, lives, loaded, atexit, builtins, json, os, select, sys, threading,
                   traceback)
        os.close(says_w)
        end = _Child(pid, says_r, os, select, time)
        took = end.took()
        if took is not None:
            relay, budget_ms = took
            if last is not None and last != relay:
                _unlink(os, os.path.join(d, "status.%d" % last))
            last = relay
            said = end.ended(budget_ms / 1000.0, signal)
            if said is not None:
                try:
                    with open(os.path.join(d, "status.%d" % relay), "w") as f:
                        f.write(said)
                except OSError:
                    pass
        # A fresh `life` under the name before this one is let go: the relay
        # holding this one sees its end; the next relay opens the fresh one.
        fresh = life + ".next"
        _unlink(os, fresh)
        os.mkfifo(fresh)
        fd = os.open(fresh, os.O_RDWR)
        os.rename(fresh, life)
        os.dup2(fd, 4, inheritable=False)
        os.close(fd)
        end.reap()


class _Child:
    """The server's view of one call's child: what it says on its pipe
    (`t <relay> <budget ms>` once it has taken a call, `d` once it has
    reported its exit code and closed its streams) and its exit."""

    def __init__(self, pid, says, os, select, time):
        self.pid, self.says, self.os, self.select, self.time = pid, says, os, select, time
        self.pending = b""
        self.open = True
        self.status = None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def _next(self, timeout):
        """The child's next line, "" once it exited, or None when `timeout`
        (seconds; None: no limit) passed first."""
        os = self.os
        deadline = None if timeout is None else self.time.monotonic() + timeout
        while b"\n" not in self.pending:
            if self.status is not None:
                return ""
            fds = ([self.says] if self.open else []) + ([self.pidfd] if self.pidfd is not None else [])
            left = None if deadline is None else max(0.0, deadline - self.time.monotonic())
            if self.pidfd is None:
                left = 0.002 if left is None else min(left, 0.002)
            ready = self.select.select(fds, [], [], left)[0]
            if self.says in ready:
                chunk = os.read(self.says, 64)
                self.pending += chunk
                self.open = bool(chunk)
            if self.pidfd is None or self.pidfd in ready:
                self._exited(os.WNOHANG)
            if b"\n" not in self.pending and deadline is not None and self.time.monotonic() >= deadline:
                return None
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode("ascii", "replace")

    def _exited(self, flags):
        done, st = self.os.waitpid(self.pid, flags)
        if done:
            code = self.os.waitstatus_to_exitcode(st)
            self.status = str(code if code >= 0 else 128 - code)

    def took(self):
        """(relay pid, budget ms) of the call it took; None if it died first."""
        line = self._next(None)
        try:
            kind, relay, budget = line.split()
            if kind == "t":
                return int(relay), int(budget)
        except ValueError:
            pass
        return None

    def ended(self, budget, signal):
        """What the status file should say once the call ended: None when
        the child wrote it itself (`d`), its exit code when it died without,
        `timeout` when the budget passed (its process group is killed)."""
        line = self._next(budget)
        if line == "d":
            return None
        if line is None:
            try:
                self.os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._exited(0)
            return "timeout"
        while self.status is None:
            self._exited(0)
        return self.status

    def reap(self):
        if self.status is None:
            self._exited(0)
        self.os.close(self.says)
        if self.pidfd is not None:
            self.os.close(self.pidfd)


def _owned_by_me(os, path):
    """A real directory of this process's user that only it may change."""
    import stat
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _fresh_globals(builtins):
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": None,
            "__spec__": None, "__loader__": None, "__package__": None}


def _unlink(os, name):
    try:
        os.unlink(name)
    except OSError:
        pass


def _child(d, says, lives, loaded, atexit, builtins, json, os, select, sys, threading, traceback):
    # Waiting: for a relay's line on `in`, or for the server's end (then
    # this child has nothing to wait for either).
    while True:
        ready = select.select([3, lives], [], [])[0]
        if lives in ready:
            os._exit(97)
        line = os.read(3, 64).split(b"\n", 1)[0]
        try:
            relay, budget_ms = (int(x) for x in line.split())
            break
        except ValueError:
            continue
    os.close(3)
    os.close(lives)
    status = os.path.join(d, "status.%d" % relay)
    # The relay keeps this exec's stdin, stdout and stderr on its fds 6-8.
    with open("/proc/%d/fd/6" % relay, "rb") as f:
        buf = f.read()
    head, data = buf.split(b"\n", 1)
    del buf
    req = json.loads(head)
    data = data[:int(req["stdin"])]
    # Opened now: the call drops root (its wrapper's _as_guest) and could
    # not open it later.
    status_fd = os.open(status, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    os.write(status_fd, b"137")  # taken: from here on the call counts as run
    os.write(says, b"t %d %d\n" % (relay, budget_ms))
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

    real_exit = os._exit

    def report(code):
        try:
            os.ftruncate(status_fd, 0)
            os.pwrite(status_fd, str(code & 0xFF).encode("ascii"), 0)
        except Exception:
            pass

    def ended(code):
        # The call is over before the process is: tell the server its status
        # is written, and let go of the streams (the teardown is off the
        # call's path).
        report(code)
        try:
            os.write(says, b"d\n")
        except OSError:
            pass
        for fd in (0, 1, 2, 4):
            try:
                os.close(fd)
            except OSError:
                pass
        real_exit(code & 0xFF)

    def _exit(code):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        ended(code)

    os._exit = _exit
    sys.argv[:] = ["-c"]
    ns = loaded.get(req["script"])
    if ns is None:
        script = compile(req["script"], "<string>", "exec", dont_inherit=True)
        ns = _fresh_globals(builtins)
    del req
    hooks = atexit._ncallbacks()
    try:
        if "_main" in ns:
            ns["_main"]()
        else:
            exec(script, ns)
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
        # skip tearing down the modules loaded ahead, and end the call before
        # the process is gone (its teardown is off the call's path).
        _exit(code)
    sys.exit(code)


_ready(globals().get("_WRAPPERS") or [])
