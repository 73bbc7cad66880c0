# sandbox-code-runner: installs the PyPI iii-sdk for python guests.
# argv: python3 -Ic <this file>   (cwd /tmp; its own exec and budget, ~5-10 s)
# Installs into /tmp/.iii-py (private tmpfs, never the image's site-packages),
# where run.py/invoke.py import it from on first use of `iii`.
# Exit 0: installed (or already was). 3: no pip in this python. Other non-zero:
# pip's own failure (its stderr says why); the runtime still works, and `iii`
# raises a clear "not installed" error on first use.
# The install is staged and renamed into place, so a failed or killed install
# never leaves a half-installed SDK that the wrappers would try to import.
# It runs as root (python3 -I, pip -I, from /): guest code runs as another
# user, who may have left anything in /tmp, so a DEST that is not root's
# own is no install at all, and the stage is a fresh mkdtemp.
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

SPEC = "iii-sdk==0.25.0"
DEST = os.environ.get("SCR_PY_SDK_DIR") or "/tmp/.iii-py"  # overridable for tests
MARKER = os.path.join(DEST, ".scr-installed")


def owned(path):
    """A real directory of this process's user that only it may change."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def replace(stage, dest):
    """Moves the finished `stage` to `dest`, whatever was there."""
    os.chmod(stage, 0o755)
    if os.path.islink(dest) or (os.path.lexists(dest) and not os.path.isdir(dest)):
        os.unlink(dest)
    else:
        shutil.rmtree(dest, ignore_errors=True)  # a leftover without the marker
    os.rename(stage, dest)


def main():
    if owned(DEST) and os.path.exists(MARKER):
        print("%s already installed in %s" % (SPEC, DEST))
        return 0
    if importlib.util.find_spec("pip") is None:
        sys.stderr.write("pip is not available to %s (no `python3 -m pip`): cannot install %s\n"
                         % (sys.executable, SPEC))
        return 3
    stage = tempfile.mkdtemp(prefix=os.path.basename(DEST) + ".part-", dir=os.path.dirname(DEST))
    env = dict(os.environ,
               # --target already bypasses PEP 668's externally-managed check;
               # the variable covers pips that apply it anyway (older ones ignore it).
               PIP_BREAK_SYSTEM_PACKAGES="1",
               PIP_ROOT_USER_ACTION="ignore",
               PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1",
               PIP_PROGRESS_BAR="off")
    started = time.monotonic()
    rc = subprocess.call([sys.executable, "-I", "-m", "pip", "install", "--quiet", "--no-cache-dir",
                          "--no-warn-conflicts", "--no-warn-script-location",
                          "--target", stage, SPEC], env=env, cwd="/")
    if rc != 0:
        shutil.rmtree(stage, ignore_errors=True)
        sys.stderr.write("pip install %s failed (exit %d)\n" % (SPEC, rc))
        return rc
    open(os.path.join(stage, ".scr-installed"), "w").close()
    replace(stage, DEST)
    print("%s installed in %s (%.1fs)" % (SPEC, DEST, time.monotonic() - started))
    return 0


sys.exit(main())
