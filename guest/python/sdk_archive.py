# sandbox-code-runner: moves an installed python iii-sdk between VMs as one
# archive, so that only the first VM of a worker pays the pip install.
# argv: python3 -Ic <this file> <mode> [args...]   (cwd /tmp; its own exec
# and budget, never the caller's timeout_ms)
#
#   key                         prints this python's cache key (one JSON line)
#   pack <archive>              archives the installed SDK dir (which must hold
#                               the install marker) as a gzip tar; prints
#                               {"key","size","sha256"}
#   read <archive> <off> <len>  prints base64 of that slice (the worker reads
#                               the archive in slices under the daemon's 1 MiB
#                               stdout cut; the last slice removes the archive)
#   unpack <key> <sha256> <n> <dir>
#                               joins the base64 text chunks <dir>/c0..c<n-1>,
#                               and installs them only if this python's key is
#                               <key> and the bytes hash to <sha256>:
#                               exit 0 installed (or already was), 10 the key
#                               differs (prints this VM's key), 11 the digest
#                               differs, 12 a bad archive. The chunks are removed;
#                               an unpacked tree holds `.scr-planted`.
#
# Everything lands under /tmp (private tmpfs), never the image's rootfs. The
# unpack is staged and renamed into place, like the pip install, so a killed
# unpack never leaves a half-installed SDK. It runs as root (python3 -I):
# like install_sdk.py it counts a DEST only when it is root's own, and
# stages in a fresh mkdtemp.
import base64
import hashlib
import json
import os
import shutil
import stat
import sys
import tarfile
import tempfile

SPEC = "iii-sdk==0.25.0"
DEST = os.environ.get("SCR_PY_SDK_DIR") or "/tmp/.iii-py"  # overridable for tests
MARKER = ".scr-installed"


def key():
    """What a planted SDK must match: interpreter, version, ABI, platform, libc."""
    import platform
    import sysconfig
    libc = platform.libc_ver()
    return json.dumps({
        "sdk": SPEC,
        "impl": sys.implementation.name,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "soabi": sysconfig.get_config_var("SOABI") or "",
        "platform": sysconfig.get_platform(),
        "machine": platform.machine(),
        "libc": "%s-%s" % libc if libc[0] else "unknown",
        "maxsize": sys.maxsize,
    }, sort_keys=True, separators=(",", ":"))


def owned(path):
    """A real directory of this process's user that only it may change."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def pack(archive):
    if not (owned(DEST) and os.path.exists(os.path.join(DEST, MARKER))):
        sys.stderr.write("no installed SDK in %s\n" % DEST)
        return 3
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    part = archive + ".part"
    with tarfile.open(part, "w:gz", compresslevel=6) as tf:
        tf.add(DEST, arcname=".")
    os.rename(part, archive)
    h = hashlib.sha256()
    with open(archive, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    print(json.dumps({"key": key(), "size": os.path.getsize(archive), "sha256": h.hexdigest()}))
    return 0


def read(archive, off, length):
    with open(archive, "rb") as f:
        f.seek(int(off))
        sys.stdout.write(base64.b64encode(f.read(int(length))).decode("ascii"))
        last = f.tell() >= os.fstat(f.fileno()).st_size
    if last:
        os.remove(archive)  # read out: the VM's tenant has no use for it
    return 0


def vetted_members(tf):
    """Only plain files and directories, named relative to the root with no
    `..`: the archive came from another VM, so it gets no trust it does not
    need (no links, devices, absolute or escaping names)."""
    members = tf.getmembers()
    for m in members:
        parts = m.name.split("/")
        if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in parts:
            raise ValueError("unexpected archive member %r" % m.name)
        m.mode &= 0o755
        m.uid = m.gid = 0
        m.uname = m.gname = ""
    return members


def extract(raw, stage):
    """Extracts the vetted tar `raw` into `stage`: with the image's `tar`
    when it has one (a quarter of tarfile's time for ~1,500 members), else
    with tarfile."""
    import io
    import shutil as sh
    import subprocess
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        members = vetted_members(tf)
        os.makedirs(stage)
        tar = sh.which("tar")
        if tar:
            r = subprocess.run(
                [tar, "-x", "-f", "-", "-C", stage, "--no-same-owner", "--no-same-permissions"],
                input=raw, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if r.returncode == 0:
                return
            sh.rmtree(stage, ignore_errors=True)
            os.makedirs(stage)
        tf.extractall(stage, members=members)


def unpack(want_key, want_sha, n, chunk_dir):
    try:
        if owned(DEST) and os.path.exists(os.path.join(DEST, MARKER)):
            print("present")
            return 0
        mine = key()
        if mine != want_key:
            print(mine)
            return 10
        data = base64.b64decode("".join(
            open(os.path.join(chunk_dir, "c%d" % i)).read() for i in range(int(n))))
        if hashlib.sha256(data).hexdigest() != want_sha:
            sys.stderr.write("archive digest mismatch\n")
            return 11
        tmp = tempfile.mkdtemp(prefix=os.path.basename(DEST) + ".part-", dir=os.path.dirname(DEST))
        stage = os.path.join(tmp, "tree")
        import gzip
        try:
            # Decompressed once, in memory: the members are vetted before a
            # byte is written, and tarfile seeks back between listing and
            # extracting, which a gzip stream pays by re-reading.
            extract(gzip.decompress(data), stage)
        except (tarfile.TarError, ValueError, OSError, EOFError, gzip.BadGzipFile) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            sys.stderr.write("bad SDK archive: %s\n" % e)
            return 12
        if not os.path.exists(os.path.join(stage, MARKER)):
            shutil.rmtree(tmp, ignore_errors=True)
            sys.stderr.write("bad SDK archive: no install marker\n")
            return 12
        # Says, inside the VM, that this tree came from the worker's archive
        # and no pip ran here.
        open(os.path.join(stage, ".scr-planted"), "w").close()
        os.chmod(stage, 0o755)
        if os.path.islink(DEST) or (os.path.lexists(DEST) and not os.path.isdir(DEST)):
            os.unlink(DEST)
        else:
            shutil.rmtree(DEST, ignore_errors=True)  # a leftover without the marker
        os.rename(stage, DEST)
        os.rmdir(tmp)
        print("unpacked")
        return 0
    finally:
        shutil.rmtree(chunk_dir, ignore_errors=True)


def main(argv):
    mode = argv[0] if argv else ""
    if mode == "key":
        print(key())
        return 0
    if mode == "pack" and len(argv) == 2:
        return pack(argv[1])
    if mode == "read" and len(argv) == 4:
        return read(*argv[1:])
    if mode == "unpack" and len(argv) == 5:
        return unpack(*argv[1:])
    sys.stderr.write("usage: key | pack <archive> | read <archive> <off> <len> | unpack <key> <sha256> <n> <dir>\n")
    return 2


sys.exit(main(sys.argv[1:]))
