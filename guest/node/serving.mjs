// sandbox-code-runner: what node's long-lived interpreters share, a
// session's (guest/session/session.mjs) and a scope server
// (guest/prestart/scope.mjs). The worker puts it in front of each; it uses
// their imports (fs, Writable) and declares none of its own.

// Writes all of `buf` (bytes or text) to fd `fd`, synchronously, waiting
// out a full non-blocking pipe; any other failure drops the rest.
function writeAll(fd, buf) {
  const bytes = typeof buf === 'string' ? Buffer.from(buf) : buf;
  for (let off = 0; off < bytes.length;) {
    try {
      off += fs.writeSync(fd, bytes, off, bytes.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') return;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
  }
}

// A stream that writes by fd number, synchronously: fds 1 and 2 change
// under it from call to call (or turn to turn), and it always writes to
// what they are now. Installed as process.stdout/stderr before anything
// (the global console among it) first asks for them.
function fdStream(fd) {
  const stream = new Writable({
    write(chunk, encoding, done) {
      writeAll(fd, typeof chunk === 'string' ? Buffer.from(chunk, encoding) : chunk);
      done();
    },
  });
  stream.fd = fd;
  stream.isTTY = false;
  return stream;
}

// fd `fd` reopened on `file`: the fd closed is the lowest free one, which
// the next open takes, unless something else of this process opened a
// file in between (a thread, or what an earlier run left running on the
// thread pool): then the streams are not where a run expects them, and
// the interpreter ends (exit 97: its relay reports it).
function reopen(fd, file) {
  try { fs.closeSync(fd); } catch { /* closed */ }
  if (fs.openSync(file, fs.constants.O_WRONLY) !== fd) process.reallyExit(97);
}

// A relay's call, taken: its request off the relay's fd 6 (a header line,
// then `stdin` bytes), the exec's stdout and stderr as fds 1 and 2 (the
// streams first: one that cannot be taken leaves no status), and
// <dir>/status.<relay> saying "137" (from here on the call counts as run).
// null if any of it fails: fds 1 and 2 are /dev/null again, and no status
// says the call was taken (its relay reports that nothing ran).
function takeCall(dir, relay) {
  let status = null;
  try {
    const buf = fs.readFileSync(`/proc/${relay}/fd/6`);
    const nl = buf.indexOf(10);
    const req = JSON.parse(buf.subarray(0, nl).toString('utf8'));
    const data = buf.subarray(nl + 1, nl + 1 + Number(req.stdin));
    reopen(1, `/proc/${relay}/fd/7`);
    reopen(2, `/proc/${relay}/fd/8`);
    status = fs.openSync(`${dir}/status.${relay}`, 'w', 0o600);
    fs.writeSync(status, '137');
    return { req, data, status };
  } catch {
    if (status !== null) fs.closeSync(status);
    reopen(1, '/dev/null');
    reopen(2, '/dev/null');
    return null;
  }
}

// A run's exit code over the "137" its status file held (`status` null:
// none was taken).
function writeStatus(status, code) {
  if (status === null) return;
  try {
    fs.ftruncateSync(status, 0);
    fs.writeSync(status, String(code & 0xff), 0);
  } catch { /* the relay is gone */ }
}

// The next relay's pid off `in` (fd 3), read off the event loop (which
// keeps serving meanwhile); its end (no writer left) ends the interpreter.
let pending = '';
function nextRelay() {
  return new Promise((resolve) => {
    const more = () => {
      const nl = pending.indexOf('\n');
      if (nl >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        const pid = Number.parseInt(line, 10);
        return Number.isInteger(pid) && pid > 0 ? resolve(pid) : more();
      }
      const buf = Buffer.alloc(64);
      return fs.read(3, buf, 0, buf.length, null, (e, got) => {
        if (e || got === 0) process.reallyExit(0);
        pending += buf.subarray(0, got).toString('ascii');
        more();
      });
    };
    more();
  });
}
