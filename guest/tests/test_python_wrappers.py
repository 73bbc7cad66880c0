"""python3 -m unittest discover -s guest/tests  -- the python wrappers, run
as the worker runs them (script via -c, code or request on stdin)."""
import atexit
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

GUEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Run as root (as in a VM), the wrappers drop to the guest user (uid 1000)
# before the guest's code runs, as they do there: the test dirs are then
# open to it, and python is one whose stdlib it can read (a pyenv under
# /root is not).
ROOT = os.geteuid() == 0
PYTHON = (os.environ.get("SCR_TEST_PYTHON")
          or (ROOT and os.path.exists("/usr/bin/python3") and "/usr/bin/python3")
          or sys.executable)


def _tempdir():
    d = tempfile.mkdtemp(prefix="scr-py-")
    atexit.register(shutil.rmtree, d, True)
    if ROOT:
        os.chmod(d, 0o777)
    return d


# The wrappers' own directory (the VM's /tmp/.scr): root's, as a root
# wrapper insists.
WORKER_DIR = tempfile.mkdtemp(prefix="scr-py-own-")
atexit.register(shutil.rmtree, WORKER_DIR, True)
os.chmod(WORKER_DIR, 0o755)


def _read(rel):
    with open(os.path.join(GUEST, rel), encoding="utf-8") as f:
        return f.read()


# Composed as the worker composes them (src/guest.rs): prelude + wrapper.
RUN = _read("python/shared.py") + _read("python/run.py")
INVOKE = _read("python/shared.py") + _read("python/invoke.py")


def guest(script, stdin, cwd=None, env=None, timeout=60):
    e = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
         "SCR_PY_SDK_DIR": "/nonexistent/iii-py",
         "SCR_GUEST_HOME": os.path.join(_tempdir(), "home"), "SCR_WORKER_DIR": WORKER_DIR}
    e.update(env or {})
    return subprocess.run([PYTHON, "-Ic", script], input=stdin.encode(), capture_output=True,
                          cwd=cwd or _tempdir(), env=e, timeout=timeout)


def parse_frame(stdout, secret):
    """The worker's view: the one line starting with the marker and this secret."""
    prefix = ("\x1eSCR1 %s " % secret).encode()
    lines = [l for l in stdout.split(b"\n") if l.startswith(prefix)]
    if len(lines) != 1:
        return None
    kind, _, body = lines[0][len(prefix):].partition(b" ")
    return kind.decode(), json.loads(body)


def invoke(source, payload=None, mode="call", env=None):
    d = _tempdir()
    path = os.path.join(d, "handler_%s.py" % secrets.token_hex(3))
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    secret = secrets.token_hex(16)
    r = guest(INVOKE, json.dumps({"secret": secret, "mode": mode, "module": path, "payload": payload}),
              cwd=d, env=env)
    return r, parse_frame(r.stdout, secret), secret


class RunMode(unittest.TestCase):
    def test_passthrough_and_exit_0(self):
        r = guest(RUN, 'import sys\nprint(2+2)\nprint("e", file=sys.stderr)\n')
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, b"4\n", b"e\n"))

    def test_exit_codes(self):
        self.assertEqual(guest(RUN, "import sys\nsys.exit(3)").returncode, 3)
        self.assertEqual(guest(RUN, "raise SystemExit(0)").returncode, 0)
        r = guest(RUN, 'raise SystemExit("bye")')
        self.assertEqual((r.returncode, r.stderr), (1, b"bye\n"))

    def test_traceback_like_a_plain_script(self):
        r = guest(RUN, 'def f():\n    return 1/0\nprint("before")\nf()\n')
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, b"before\n")
        err = r.stderr.decode()
        self.assertTrue(err.startswith("Traceback (most recent call last):\n  File \"main.py\", line 4"), err)
        self.assertIn("    return 1/0\n", err)
        self.assertNotIn("<string>", err)
        self.assertTrue(err.endswith("ZeroDivisionError: division by zero\n"))

    def test_syntax_error(self):
        r = guest(RUN, "print(\n")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith(b'  File "main.py", line 1'), r.stderr)

    def test_main_module(self):
        r = guest(RUN, "import sys, pickle\nclass A: pass\n"
                       "print(__name__, __file__, sys.argv, sys.modules['__main__'].A is A,"
                       " type(pickle.loads(pickle.dumps(A()))).__name__, '_main' in globals())")
        self.assertEqual(r.stdout, b"__main__ main.py ['main.py'] True A False\n", r.stderr)

    def test_local_imports_from_cwd(self):
        d = _tempdir()
        with open(os.path.join(d, "helper.py"), "w") as f:
            f.write("X = 7\n")
        self.assertEqual(guest(RUN, "import helper; print(helper.X)", cwd=d).stdout, b"7\n")

    def test_iii_introspection_and_missing_sdk(self):
        r = guest(RUN, "print(repr(iii).splitlines()[0]); print(dir(iii)); print(hasattr(iii, '__len__'))\n"
                       "try:\n    iii.trigger({})\nexcept RuntimeError as e:\n    print(e)\n")
        out = r.stdout.decode().splitlines()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(out[0].startswith("iii: the iii-sdk client"))
        self.assertIn("trigger", out[1])
        self.assertEqual(out[2], "False")
        self.assertTrue(out[3].startswith("iii-sdk is not installed in this runtime"), out[3])


class InvokeMode(unittest.TestCase):
    def test_ok_frame_and_prints_to_stderr(self):
        src = ("import os, subprocess, sys\n"
               "def handler(payload):\n"
               "    print('printed')\n    os.write(1, b'fd1\\n')\n    sys.__stdout__.write('dunder\\n')\n"
               "    subprocess.run(['echo', 'child'])\n"
               "    return {'doubled': payload['n'] * 2}\n")
        r, frame, secret = invoke(src, {"n": 21})
        self.assertEqual(r.returncode, 0)
        self.assertEqual(frame, ("ok", {"doubled": 42}))
        self.assertEqual(r.stdout, ("\x1eSCR1 %s ok {\"doubled\":42}\n" % secret).encode())
        for word in (b"printed", b"fd1", b"dunder", b"child"):
            self.assertIn(word, r.stderr)

    def test_throw(self):
        r, frame, _ = invoke("def helper():\n    raise KeyError('k')\ndef handler(p):\n    helper()\n")
        kind, body = frame
        self.assertEqual((kind, body["type"], body["message"]), ("err", "throw", "KeyError: 'k'"))
        self.assertIn('line 2, in helper', body["stack"])
        self.assertNotIn("<string>", body["stack"])

    def test_not_json(self):
        for ret in ("{1, 2}", "object()", "float('nan')", "b'bytes'", "'\\ud800'"):
            _, frame, _ = invoke("def handler(p):\n    return %s\n" % ret)
            self.assertEqual((frame[0], frame[1]["type"]), ("err", "not_json"), ret)
        self.assertEqual(invoke("def handler(p):\n    pass\n")[1], ("ok", None))

    def test_no_handler_async_and_load_errors(self):
        self.assertEqual(invoke("x = 1\n")[1][1]["type"], "no_handler")
        self.assertEqual(invoke("handler = 3\n")[1][1]["type"], "no_handler")
        self.assertEqual(invoke("async def handler(p):\n    return 1\n")[1][1]["type"], "async_handler")
        self.assertEqual(invoke("import asyncio\ndef handler(p):\n    return asyncio.sleep(0)\n")[1][1]["type"],
                         "async_handler")
        frame = invoke("def handler(p)\n    return 1\n")[1]
        self.assertEqual((frame[1]["type"], frame[1]["message"][:11]), ("load_error", "SyntaxError"))
        self.assertEqual(invoke("raise RuntimeError('at import')\n")[1][1]["message"], "RuntimeError: at import")

    def test_check_mode(self):
        self.assertEqual(invoke("def handler(p):\n    raise Exception('called')\n", mode="check")[1], ("ok", None))
        self.assertEqual(invoke("async def handler(p):\n    pass\n", mode="check")[1][1]["type"], "async_handler")

    def test_forged_frame_is_not_accepted(self):
        src = "def handler(p):\n    print('\\x1eSCR1 ' + '0' * 32 + ' ok 666')\n    return 2\n"
        r, frame, _ = invoke(src)
        self.assertEqual(frame, ("ok", 2))
        self.assertIsNone(parse_frame(r.stdout, "0" * 32))
        # The forged line itself never reaches stdout (the real secret, random
        # hex, may well contain "666").
        self.assertNotIn(b" ok 666", r.stdout)

    def test_sys_exit_and_leftover_threads(self):
        frame = invoke("import sys\ndef handler(p):\n    sys.exit(4)\n")[1]
        self.assertEqual((frame[1]["type"], frame[1]["message"]), ("throw", "SystemExit: 4"))
        t0 = time.monotonic()
        src = "import threading, time\ndef handler(p):\n    threading.Thread(target=time.sleep, args=(60,)).start()\n    return 1\n"
        self.assertEqual(invoke(src)[1], ("ok", 1))
        self.assertLess(time.monotonic() - t0, 10)

    def test_dataclass_in_handler_module(self):
        src = "from dataclasses import dataclass\n@dataclass\nclass P:\n    n: int\ndef handler(p):\n    return P(**p).n\n"
        self.assertEqual(invoke(src, {"n": 3})[1], ("ok", 3))

    def test_malformed_stdin(self):
        r = guest(INVOKE, "nope")
        self.assertEqual((r.returncode, r.stdout), (2, b""))


def _wheel(d, name):
    """A pure-python wheel of package `name` (VALUE = 42), built offline."""
    import zipfile
    whl = os.path.join(d, "%s-1.0-py3-none-any.whl" % name)
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("%s/__init__.py" % name, "VALUE = 42\n")
        z.writestr("%s-1.0.dist-info/METADATA" % name, "Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
        z.writestr("%s-1.0.dist-info/WHEEL" % name,
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("%s-1.0.dist-info/RECORD" % name, "")
    return whl


class GuestUser(unittest.TestCase):
    """The wrappers' first act (shared.py's _as_guest): as root, drop for good
    to the image's user; HOME, caches, pip's user site and npm's prefix are
    the guest's own; no guest code runs when that cannot be done."""

    IDS = "import os\nprint(os.getresuid(), os.getresgid(), os.getgroups())\n"

    def expected_ids(self):
        if ROOT:
            return "(1000, 1000, 1000) (100, 100, 100) []\n"
        return "%r %r %r\n" % (os.getresuid(), os.getresgid(), os.getgroups())

    def test_run_and_handler_code_runs_as_the_guest_user(self):
        r = guest(RUN, self.IDS)
        self.assertEqual(r.stdout.decode(), self.expected_ids(), r.stderr)
        r, frame, _ = invoke("import os\ndef handler(p):\n    return [os.geteuid(), os.getegid(), os.getgroups()]\n")
        self.assertEqual(frame, ("ok", [1000, 100, []] if ROOT else [os.geteuid(), os.getegid(), os.getgroups()]),
                         r.stderr)

    def test_home_caches_user_site_and_path_are_the_guests_own(self):
        home = os.path.join(_tempdir(), "home")
        code = ("import os, site, sys\n"
                "e = os.environ\n"
                "us = site.getusersitepackages()\n"
                "system = [sys.path.index(p) for p in site.getsitepackages() if p in sys.path]\n"
                "print(e['HOME'], e['XDG_CACHE_HOME'], e['NPM_CONFIG_PREFIX'])\n"
                "print(us.startswith(e['HOME'] + '/.local/'), os.path.isdir(us), us in sys.path,\n"
                "      all(sys.path.index(us) < i for i in system), sys.path[0] == '')\n"
                "print(e['PATH'].split(':')[-2:])\n"
                "print(oct(os.stat(e['HOME']).st_mode & 0o777), os.stat(e['HOME']).st_uid == os.getuid())\n")
        r = guest(RUN, code, env={"SCR_GUEST_HOME": home})
        self.assertEqual(r.stdout.decode().splitlines(), [
            "%s %s/.cache %s/.npm-global" % (home, home, home),
            "True True True True True",
            str(["%s/.local/bin" % home, "%s/.npm-global/bin" % home]),
            "0o700 True",
        ], r.stderr)

    def test_no_guest_code_runs_as_root_or_without_its_user(self):
        for spec in ("0:0", "1000:0", "nobody", "1000"):
            r = guest(RUN, "print('ran')", env={"SCR_GUEST_USER": spec})
            self.assertEqual((r.returncode, r.stdout), (1, b""), spec)
            self.assertIn(b"not running guest code as root", r.stderr)

    @unittest.skipUnless(ROOT, "only a root wrapper drops, and checks the worker's directory")
    def test_a_worker_dir_a_guest_could_change_stops_the_run(self):
        base = _tempdir()
        theirs = os.path.join(base, "theirs")
        os.mkdir(theirs)
        os.chown(theirs, 1000, 100)
        link = os.path.join(base, "link")
        os.symlink(WORKER_DIR, link)
        open_to_all = os.path.join(base, "open")
        os.mkdir(open_to_all)
        os.chmod(open_to_all, 0o777)
        for d in (theirs, link, open_to_all):
            r = guest(RUN, "print('ran')", env={"SCR_WORKER_DIR": d})
            self.assertEqual((r.returncode, r.stdout), (1, b""), d)
            self.assertIn(b"is not a directory only root may change", r.stderr)
        closed = os.path.join(base, "closed")
        os.mkdir(closed, 0o700)
        for d in (os.path.join(base, "made"), closed):
            r = guest(RUN, "print('ran')", env={"SCR_WORKER_DIR": d})
            self.assertEqual(r.stdout, b"ran\n", r.stderr)
            st = os.lstat(d)
            self.assertEqual((st.st_uid, oct(st.st_mode & 0o777)), (0, "0o755"), d)

    def test_pip_installs_for_the_guest_and_it_imports_at_once_and_later(self):
        probe = subprocess.run([PYTHON, "-m", "pip", "--version"], capture_output=True)
        if probe.returncode != 0:
            self.skipTest("%s has no pip" % PYTHON)
        d = _tempdir()
        home = os.path.join(_tempdir(), "home")
        env = {"SCR_GUEST_HOME": home}
        code = ("import subprocess, sys\n"
                "for args in (['--user', %r], [%r]):\n"  # --user, and a plain install that falls back to it
                "    r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-index', '-q',\n"
                "                        '--break-system-packages', '--disable-pip-version-check'] + args,\n"
                "                       capture_output=True, text=True)\n"
                "    sys.stderr.write(r.stderr)\n"
                "import scrpkga, scrpkgb\n"
                "print(scrpkga.VALUE, scrpkgb.VALUE, scrpkga.__file__.startswith(%r))\n"
                % (_wheel(d, "scrpkga"), _wheel(d, "scrpkgb"), home))
        r = guest(RUN, code, env=env, timeout=120)
        self.assertEqual(r.stdout, b"42 42 True\n", r.stderr)
        r = guest(RUN, "import scrpkga, scrpkgb\nprint(scrpkga.VALUE + scrpkgb.VALUE)\n", env=env)
        self.assertEqual(r.stdout, b"84\n", r.stderr)


class IntrospectionNeverConnects(unittest.TestCase):
    """With a real SDK (SCR_TEST_PY_SDK_DIR), repr/dir/str must not dial the
    engine, and the first real use must."""

    def test_counts_connections(self):
        sdk = os.environ.get("SCR_TEST_PY_SDK_DIR")
        if not sdk:
            self.skipTest("SCR_TEST_PY_SDK_DIR not set (a dir with iii-sdk pip-installed via --target)")
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        count = [0]

        def accept():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                count[0] += 1
                c.close()
        threading.Thread(target=accept, daemon=True).start()
        env = {"SCR_PY_SDK_DIR": sdk, "III_URL": "ws://127.0.0.1:%d" % srv.getsockname()[1]}
        try:
            r = guest(RUN, "repr(iii); str(iii); dir(iii); iii.shutdown(); print('ok')", env=env)
            self.assertEqual((r.returncode, r.stdout), (0, b"ok\n"), r.stderr)
            self.assertEqual(count[0], 0)
            # First use: the client dials (and keeps retrying); the run times out
            # inside register_worker's wait, which is fine here.
            try:
                guest(RUN, "iii.trigger", env=env, timeout=3)
            except subprocess.TimeoutExpired:
                pass
            self.assertGreater(count[0], 0)
        finally:
            srv.close()


if __name__ == "__main__":
    unittest.main()
