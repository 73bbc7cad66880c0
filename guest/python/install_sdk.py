# sandbox-code-runner: installs the PyPI iii-sdk for python guests.
# argv: python3 -c <this file>   (cwd /tmp; its own exec and budget, ~5-10 s)
# Installs into /tmp/.iii-py (private tmpfs, never the image's site-packages),
# where run.py/invoke.py import it from on first use of `iii`.
# Exit 0: installed (or already was). 3: no pip in this python. Other non-zero:
# pip's own failure (its stderr says why); the runtime still works, and `iii`
# raises a clear "not installed" error on first use.
# The install is staged and renamed into place, so a failed or killed install
# never leaves a half-installed SDK that the wrappers would try to import.
import importlib.util
import os
import shutil
import subprocess
import sys
import time

SPEC = "iii-sdk==0.25.0"
DEST = os.environ.get("SCR_PY_SDK_DIR") or "/tmp/.iii-py"  # overridable for tests
MARKER = os.path.join(DEST, ".scr-installed")


def main():
    if os.path.exists(MARKER):
        print("%s already installed in %s" % (SPEC, DEST))
        return 0
    if importlib.util.find_spec("pip") is None:
        sys.stderr.write("pip is not available to %s (no `python3 -m pip`): cannot install %s\n"
                         % (sys.executable, SPEC))
        return 3
    stage = "%s.part-%d" % (DEST, os.getpid())
    shutil.rmtree(stage, ignore_errors=True)
    env = dict(os.environ,
               # --target already bypasses PEP 668's externally-managed check;
               # the variable covers pips that apply it anyway (older ones ignore it).
               PIP_BREAK_SYSTEM_PACKAGES="1",
               PIP_ROOT_USER_ACTION="ignore",
               PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1",
               PIP_PROGRESS_BAR="off")
    started = time.monotonic()
    rc = subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir",
                          "--no-warn-conflicts", "--no-warn-script-location",
                          "--target", stage, SPEC], env=env)
    if rc != 0:
        shutil.rmtree(stage, ignore_errors=True)
        sys.stderr.write("pip install %s failed (exit %d)\n" % (SPEC, rc))
        return rc
    open(os.path.join(stage, ".scr-installed"), "w").close()
    shutil.rmtree(DEST, ignore_errors=True)  # a leftover without the marker
    os.rename(stage, DEST)
    print("%s installed in %s (%.1fs)" % (SPEC, DEST, time.monotonic() - started))
    return 0


sys.exit(main())
