"""python3 -m unittest discover -s guest/tests  -- sdk_archive.py, run as the
worker runs it (script via -Ic, one mode per exec): pack, read and unpack
round-trip, and an archive from another VM gets no trust it does not need."""
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

GUEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.environ.get("SCR_TEST_PYTHON") or sys.executable
with open(os.path.join(GUEST, "python", "sdk_archive.py"), encoding="utf-8") as f:
    SCRIPT = f.read()
SLICE = 720 * 1024


class Vm:
    """One VM's /tmp: the SDK dir and the chunk dir live under it."""

    def __init__(self, test):
        self.root = tempfile.mkdtemp(prefix="scr-sdk-")
        test.addCleanup(shutil.rmtree, self.root, True)
        self.dest = os.path.join(self.root, "iii-py")
        self.chunks = os.path.join(self.root, "chunks")

    def run(self, *args, path=None):
        env = {"PATH": path if path is not None else os.environ.get("PATH", ""),
               "SCR_PY_SDK_DIR": self.dest}
        return subprocess.run([PYTHON, "-Ic", SCRIPT, *args], capture_output=True,
                              cwd=self.root, env=env, timeout=120)

    def key(self):
        out = self.run("key")
        assert out.returncode == 0, out.stderr
        return out.stdout.decode().strip()

    def plant(self, data):
        """What the worker does: base64 text chunks under the chunk dir."""
        os.makedirs(self.chunks, exist_ok=True)
        n = 0
        for off in range(0, len(data), SLICE):
            with open(os.path.join(self.chunks, "c%d" % n), "w") as f:
                f.write(base64.b64encode(data[off:off + SLICE]).decode())
            n += 1
        return str(n)

    def unpack(self, data, key=None, sha=None, path=None):
        n = self.plant(data)
        return self.run("unpack", key or self.key(), sha or hashlib.sha256(data).hexdigest(),
                        n, self.chunks, path=path)


def tgz(members):
    """A gzip tar of (TarInfo, bytes or None) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, body in members:
            if body is not None:
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
            else:
                tf.addfile(info)
    return buf.getvalue()


def file(name, body=b"x"):
    return tarfile.TarInfo(name), body


def good_tree(extra=()):
    return tgz([file("./.scr-installed", b""), file("./iii/__init__.py", b"VERSION = 1\n"),
                *extra])


class UnpackTest(unittest.TestCase):
    def test_a_good_archive_is_installed_with_its_planted_marker(self):
        for path in (None, "/nonexistent"):  # with the image's tar, and with tarfile
            with self.subTest(tar_on_path=path is None):
                vm = Vm(self)
                out = vm.unpack(good_tree(), path=path)
                self.assertEqual(out.returncode, 0, out.stderr)
                with open(os.path.join(vm.dest, "iii", "__init__.py")) as f:
                    self.assertEqual(f.read(), "VERSION = 1\n")
                self.assertTrue(os.path.exists(os.path.join(vm.dest, ".scr-planted")))
                self.assertFalse(os.path.exists(vm.chunks), "the chunks are removed")

    def test_another_interpreter_is_refused_with_this_vms_key(self):
        vm = Vm(self)
        out = vm.unpack(good_tree(), key='{"version":"0.0.0"}')
        self.assertEqual(out.returncode, 10)
        self.assertEqual(out.stdout.decode().strip(), vm.key())
        self.assertFalse(os.path.exists(vm.dest))

    def test_bytes_that_do_not_hash_to_the_digest_are_refused(self):
        vm = Vm(self)
        out = vm.unpack(good_tree(), sha="0" * 64)
        self.assertEqual(out.returncode, 11)
        self.assertFalse(os.path.exists(vm.dest))

    def test_links_devices_and_escaping_names_are_refused_before_a_byte_is_written(self):
        link = tarfile.TarInfo("./iii/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        hard = tarfile.TarInfo("./iii/hard")
        hard.type, hard.linkname = tarfile.LNKTYPE, "../../outside"
        fifo = tarfile.TarInfo("./iii/fifo")
        fifo.type = tarfile.FIFOTYPE
        for bad in [(link, None), (hard, None), (fifo, None), file("../outside"),
                    file("/abs/outside"), file("./iii/../../outside")]:
            with self.subTest(member=bad[0].name):
                vm = Vm(self)
                out = vm.unpack(good_tree([bad]))
                self.assertEqual(out.returncode, 12, out.stderr)
                self.assertIn(b"unexpected archive member", out.stderr)
                self.assertFalse(os.path.exists(vm.dest))
                self.assertFalse(os.path.exists(os.path.join(vm.root, "outside")))
                leftovers = [d for d in os.listdir(vm.root) if d.startswith("iii-py.part")]
                self.assertEqual(leftovers, [], "no staged tree is left behind")

    def test_an_archive_without_the_install_marker_is_refused(self):
        vm = Vm(self)
        out = vm.unpack(tgz([file("./iii/__init__.py")]))
        self.assertEqual(out.returncode, 12)
        self.assertFalse(os.path.exists(vm.dest))

    def test_an_sdk_dir_a_guest_could_have_made_is_no_install_and_is_replaced(self):
        # Guest code runs as another user than the unpack (root in a VM): a
        # tree it could have planted or changed is never taken as present.
        def other_owner(dest):
            os.makedirs(dest)
            os.chown(dest, 1000, 100)

        def open_to_all(dest):
            os.makedirs(dest)
            os.chmod(dest, 0o777)

        def a_link(dest):
            real = dest + "-elsewhere"
            os.makedirs(real)
            open(os.path.join(real, ".scr-installed"), "w").close()
            os.symlink(real, dest)

        cases = [open_to_all, a_link] + ([other_owner] if os.geteuid() == 0 else [])
        for make in cases:
            with self.subTest(make.__name__):
                vm = Vm(self)
                make(vm.dest)
                if not os.path.islink(vm.dest):
                    os.makedirs(os.path.join(vm.dest, "iii"))
                    with open(os.path.join(vm.dest, "iii", "__init__.py"), "w") as f:
                        f.write("PLANTED = True\n")
                    open(os.path.join(vm.dest, ".scr-installed"), "w").close()
                out = vm.unpack(good_tree())
                self.assertEqual((out.returncode, out.stdout.strip()), (0, b"unpacked"), out.stderr)
                st = os.lstat(vm.dest)
                self.assertEqual((st.st_uid, oct(st.st_mode & 0o777)), (os.geteuid(), "0o755"))
                with open(os.path.join(vm.dest, "iii", "__init__.py")) as f:
                    self.assertEqual(f.read(), "VERSION = 1\n")

    def test_garbage_is_a_bad_archive_not_a_crash(self):
        vm = Vm(self)
        out = vm.unpack(b"not a gzip tar at all")
        self.assertEqual(out.returncode, 12, out.stderr)


class RoundTripTest(unittest.TestCase):
    def test_pack_then_read_in_slices_then_unpack_elsewhere(self):
        src = Vm(self)
        os.makedirs(os.path.join(src.dest, "pkg"))
        with open(os.path.join(src.dest, ".scr-installed"), "w"):
            pass
        # More than one slice, incompressible.
        body = os.urandom(SLICE + 4096)
        with open(os.path.join(src.dest, "pkg", "blob.bin"), "wb") as f:
            f.write(body)
        archive = os.path.join(src.root, "sdk.tgz")
        packed = src.run("pack", archive)
        self.assertEqual(packed.returncode, 0, packed.stderr)
        report = json.loads(packed.stdout)
        self.assertEqual(report["key"], src.key())
        data = b""
        for off in range(0, report["size"], SLICE):
            out = src.run("read", archive, str(off), str(SLICE))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertLess(len(out.stdout), 1 << 20, "each slice stays under the 1 MiB cut")
            data += base64.b64decode(out.stdout)
        self.assertEqual(hashlib.sha256(data).hexdigest(), report["sha256"])
        self.assertFalse(os.path.exists(archive), "the last slice removes the archive")
        dst = Vm(self)
        out = dst.unpack(data, key=report["key"], sha=report["sha256"])
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(os.path.join(dst.dest, "pkg", "blob.bin"), "rb") as f:
            self.assertEqual(f.read(), body)
        # A second unpack finds it present and changes nothing.
        again = dst.unpack(data, key=report["key"], sha=report["sha256"])
        self.assertEqual((again.returncode, again.stdout.strip()), (0, b"present"))

    def test_pack_refuses_a_dir_without_the_install_marker(self):
        vm = Vm(self)
        os.makedirs(vm.dest)
        out = vm.run("pack", os.path.join(vm.root, "sdk.tgz"))
        self.assertEqual(out.returncode, 3)


if __name__ == "__main__":
    unittest.main()
