// sandbox-code-runner: a pre-started node interpreter (see relay.sh).
// argv: node /tmp/.scr/pre/ready.mjs <dir>   (this file; cwd /tmp; fds 3 and
// 4 are <dir>'s `in` and `life` FIFOs, opened read-write by the spawner;
// stdin, stdout and stderr are /dev/null). The worker prepends
// `const WRAPPERS = [<wrapper source>, ...]`.
// It loads each wrapper's definitions (everything but its last line,
// `await main();`), writes <dir>/ready, then imports the iii SDK bundle
// (when it is planted) and what a call's first use would otherwise load on
// the call's path while it waits, and writes <dir>/warm once that is done.
// It connects nothing (to the engine). It waits on fd 3 for one relay's pid
// (relay.sh's scr_relay), and reads that relay's stdin (through
// /proc/<pid>/fd/6):
//   {"script": <a wrapper, as for node --input-type=module -e>, "env": {..}, "stdin": <n bytes>}\n<n bytes>
// It takes the exec's stdout and stderr as its own fds 1 and 2 (reopened
// through /proc/<pid>/fd/7 and 8: nothing is copied), writes "137" to
// <dir>/status.<pid> (from here on the call counts as run), and runs the
// script as that command would in a fresh process: its stdin is those
// bytes, its env the VM's plus the request's, process.argv [node]. Its exit
// code replaces the "137" before `life` is let go. (The relay enforces the
// budget.) Until the call, this interpreter is root (the exec's user), and
// loads only what root owns; the call's wrapper drops to the guest user
// before any guest code.
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';

const dir = process.argv[process.argv.length - 1];

// `life` again, close-on-exec: what a call starts must not hold the call
// open (the relay waits for `life` to end). Opened before fd 4 is closed:
// a relay may wait on `life` already (it hands a call to one still
// starting), and a moment without a writer would end its read there.
const life = fs.openSync(path.join(dir, 'life'), fs.constants.O_RDWR);
fs.closeSync(4);

// Each wrapper's definitions, loaded ahead: a call only runs its main().
const TAIL = 'await main();';
const loaded = new Map();
for (const [i, text] of (typeof WRAPPERS === 'undefined' ? [] : WRAPPERS).entries()) {
  const body = text.trimEnd();
  if (!body.endsWith(TAIL)) continue;
  const file = path.join(dir, `wrapper-${i}.mjs`);
  try {
    fs.writeFileSync(file, `${body.slice(0, -TAIL.length)}export { main };\n`, { mode: 0o600 });
    loaded.set(text, await import(pathToFileURL(file).href));
  } catch { /* that wrapper runs from its text */ }
}

// Ready: a call can be taken from here on. The rest of the warm-up runs
// while this waits for one (a call that comes first shares what is in
// flight: the SDK's import is one module, however many import it), and
// says `warm` once done.
fs.writeFileSync(path.join(dir, 'ready'), '');
const SDK_DIR = process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk';
const SDK_FILE = `${SDK_DIR}/dist/index.mjs`;
const hasSdk = fs.existsSync(SDK_FILE);
async function warmUp() {
  if (hasSdk) {
    // The bundle reads ../package.json; the wrapper writes the same one.
    const pj = `${SDK_DIR}/package.json`;
    try {
      if (!fs.existsSync(pj)) {
        fs.writeFileSync(pj, JSON.stringify({
          name: 'iii-sdk', version: '0.22.1', type: 'module',
          main: './dist/index.mjs', exports: { '.': './dist/index.mjs' },
        }));
      }
      await warmClient(await import(pathToFileURL(SDK_FILE).href));
    } catch { /* the wrapper's `iii` explains on first use */ }
  }

  // What a call would otherwise pay for on first use (the builtins the
  // wrappers import are loaded with them): with the SDK, what a connecting
  // client loads and ICU (it reads the locale); stream iteration, the
  // thread pool.
  if (hasSdk) {
    for (const m of ['http', 'https', 'zlib', 'os']) await import(`node:${m}`);
    Intl.DateTimeFormat().resolvedOptions();
  }
  for await (const _ of Readable.from([Buffer.alloc(1)])) { /* warm */ }
  // A call's stdout is a pipe: its first console.log creates a pipe stream
  // and formats and writes through it. All is done once here, on a FIFO
  // nobody reads.
  try {
    const { Socket } = await import('node:net');
    const pipe = new Socket({ fd: fs.openSync(path.join(dir, 'pipe'), fs.constants.O_RDWR), readable: false });
    new console.Console({ stdout: pipe, stderr: pipe }).log('%s', 'warm');
    await new Promise((written) => pipe.write('warm\n', written));
    pipe.destroy();
  } catch { /* nothing to warm */ }
  await fs.promises.stat(dir);
  fs.writeFileSync(path.join(dir, 'warm'), '');
}
const warming = warmUp().catch(() => { /* a call's own use reports it */ });

// A client's first connection runs code nothing has run yet (the client,
// its WebSocket's handshake and framing, the http client under it): ~3x a
// later one's time. So one client runs it here, against a stand-in of the
// engine in this process, over a unix socket in <dir> that only it knows:
// it registers, makes one trigger and shuts down. Nothing of it outlives
// the warm-up, and the engine never hears of it (no token is held yet).
async function warmClient(sdk) {
  const net = await import('node:net');
  const { createHash } = await import('node:crypto');
  const sock = path.join(dir, 'warm.sock');
  const accepted = new Set();
  const server = net.createServer((socket) => {
    accepted.add(socket);
    let buf = Buffer.alloc(0);
    let open = false;
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (!open) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const key = /^sec-websocket-key:\s*(\S+)/im.exec(buf.subarray(0, end).toString('latin1'))?.[1];
        const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
        socket.write(frame(1, JSON.stringify({ type: 'workerregistered', worker_id: 'warm-up' })));
        buf = buf.subarray(end + 4);
        open = true;
      }
      for (let got = unframe(buf); got; got = unframe(buf)) {
        buf = buf.subarray(got.size);
        if (got.opcode === 8) { socket.end(frame(8, '')); return; }
        const { type, invocation_id: id, function_id: fn } = JSON.parse(got.text);
        if (type === 'invokefunction' && id) {
          socket.write(frame(1, JSON.stringify({ type: 'invocationresult', invocation_id: id, function_id: fn, result: {} })));
        }
      }
    });
    socket.on('error', () => { /* the client is gone */ });
    socket.unref();
  });
  // Whatever becomes of it (an SDK that answers otherwise, say), none of it
  // may keep a call's process alive: the server and its sockets hold no
  // ref on the loop, the client gets a second to shut down, and the
  // server's end of its socket goes in any case.
  server.unref();
  // A call taken meanwhile drops to the guest user, who may not listen in
  // <dir>: then the warm-up ends here, as any failure of it does.
  await new Promise((listening, failed) => {
    server.once('error', failed);
    server.listen(sock, listening);
  });
  try {
    const client = sdk.registerWorker(`ws+unix:${sock}:/`, {
      workerName: 'scr-warm-up', otel: { enabled: false }, enableMetricsReporting: false,
    });
    try {
      await client.trigger({ function_id: 'scr::warm-up', payload: {}, timeoutMs: 2000 });
    } finally {
      let timer;
      const late = new Promise((gone) => { timer = setTimeout(gone, 1000); timer.unref(); });
      await Promise.race([client.shutdown(), late]);
      clearTimeout(timer);
    }
  } finally {
    for (const socket of accepted) socket.destroy();
    server.close();
    fs.rmSync(sock, { force: true });
  }
}

// One unmasked server frame (RFC 6455 5.2).
function frame(opcode, text) {
  const body = Buffer.from(text);
  const head = body.length < 126 ? Buffer.from([0x80 | opcode, body.length])
    : Buffer.from([0x80 | opcode, 126, body.length >> 8, body.length & 0xff]);
  return Buffer.concat([head, body]);
}

// The first whole masked client frame in `b`: { opcode, text, size }, or
// null until it has arrived.
function unframe(b) {
  if (b.length < 2) return null;
  let len = b[1] & 0x7f;
  let at = 2;
  if (len === 126) { if (b.length < 4) return null; len = b.readUInt16BE(2); at = 4; }
  else if (len === 127) { if (b.length < 10) return null; len = Number(b.readBigUInt64BE(2)); at = 10; }
  if (b.length < at + 4 + len) return null;
  const mask = b.subarray(at, at + 4);
  const body = Buffer.from(b.subarray(at + 4, at + 4 + len));
  for (let i = 0; i < body.length; i++) body[i] ^= mask[i & 3];
  return { opcode: b[0] & 0x0f, text: body.toString('utf8'), size: at + 4 + len };
}

// One relay's pid on fd 3 (read off the event loop, which warms meanwhile),
// then its request on its fd 6: a header line, then exactly `stdin` bytes.
function nextRelay() {
  const line = Buffer.alloc(64);
  let n = 0;
  return new Promise((resolve) => {
    const more = () => fs.read(3, line, n, line.length - n, null, (err, got) => {
      if (err || got === 0) process.reallyExit(97);
      n += got;
      if (line[n - 1] !== 10) return more();
      fs.closeSync(3);
      return resolve(Number.parseInt(line.subarray(0, n).toString('ascii'), 10));
    });
    more();
  });
}

function readRequest(relay) {
  const buf = fs.readFileSync(`/proc/${relay}/fd/6`);
  const nl = buf.indexOf(10);
  const req = JSON.parse(buf.subarray(0, nl).toString('utf8'));
  return { req, data: buf.subarray(nl + 1, nl + 1 + Number(req.stdin)) };
}

// The exec's streams, as fds 1 and 2: an fd closed is the lowest free one,
// the next one opened. A failure here leaves no status: nothing ran, and the
// call runs cold.
function takeStreams(relay) {
  for (const [fd, held] of [[1, 7], [2, 8]]) {
    fs.closeSync(fd);
    if (fs.openSync(`/proc/${relay}/fd/${held}`, fs.constants.O_WRONLY) !== fd) process.reallyExit(97);
  }
}

const relay = await nextRelay();
const { req, data } = readRequest(relay);
// A call taken before `warm` waits for the rest of the warm-up: its opens
// run on the thread pool, and one could take fd 1 or 2 between takeStreams'
// close and open (then the call would run cold).
await warming;
takeStreams(relay);
// Opened now: the call drops root (its wrapper's asGuest) and could not
// open it later.
const status = fs.openSync(path.join(dir, `status.${relay}`), 'w', 0o644);
fs.writeSync(status, '137');
Object.assign(process.env, req.env || {});

// The call's end is the end of `life`: it is let go, with the streams, as
// soon as the exit code is written (after every 'exit' listener ran, on
// either way out: process.exit() or an empty event loop), before the
// process is gone. An uncaught error's report is printed after 'exit': then
// all stay until the process is gone.
let ended = false;
let fatal = false;
process.on('uncaughtExceptionMonitor', () => { fatal = true; });
const end = (code) => {
  if (ended) return;
  ended = true;
  try {
    fs.ftruncateSync(status, 0);
    fs.writeSync(status, String((code ?? 0) & 0xff), 0);
  } catch { /* gone */ }
  if (fatal) return;
  for (const fd of [1, 2, life]) { try { fs.closeSync(fd); } catch { /* closed */ } }
};
const emit = process.emit;
process.emit = function emitting(event, ...args) {
  const r = emit.call(this, event, ...args);
  if (event === 'exit') end(process.exitCode ?? args[0]);
  return r;
};
const reallyExit = process.reallyExit;
process.reallyExit = function exit(code) {
  end(code);
  return reallyExit.call(process, code);
};

const stdin = Readable.from([data]);
Object.defineProperty(process, 'stdin', { configurable: true, enumerable: true, get: () => stdin });
process.argv.length = 1;
const ahead = loaded.get(req.script);
if (ahead) {
  await ahead.main();
} else {
  const wrapper = path.join(dir, 'wrapper.mjs');
  fs.writeFileSync(wrapper, req.script, { mode: 0o600 });
  await import(pathToFileURL(wrapper).href);
}
