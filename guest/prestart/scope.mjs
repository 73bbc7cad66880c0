// sandbox-code-runner: node's scope servers (see scope.sh), three parts of
// one file:
//
// - the dispatcher (`node scope.mjs dispatch <base> <keep> <uid> <gid>`),
//   root's, one per VM, in its own session; fd 3 is <base>/in (a FIFO,
//   read-write, held from before its first moment). It runs no call: it
//   keeps <keep> servers and hands each relay's call to one that waits.
// - a server (`node scope.mjs serve <wrappers dir> <keep>`), the dispatcher's
//   child, as the guest user, in a session of its own, talking to the
//   dispatcher on node's IPC channel only. It runs one call at a time,
//   each in a fresh worker thread started ahead.
// - a scope (a worker thread): one call's interpreter, with its own V8
//   isolate, so its own globals, module graph, `process.env` copy,
//   listeners, exit code and heap.
//
// A call: its relay (root's shell) claims a slot <k>, opens <base>/<k>/life
// for reading, and writes `<relay pid> <budget ms> <k>` on `in`. The
// dispatcher opens that relay's fds 6, 7 and 8 (the exec's stdin, stdout
// and stderr, root's: only root may open them through /proc), makes the
// two output pipes the guest's, and sends all three to a waiting server
// over IPC (SCM_RIGHTS: nothing is copied, nothing else runs). The server
// takes the pipes as its fds 1 and 2 (so what the call starts with
// inherited stdio writes there too), reads the request off the third
//   {"script": <a wrapper>, "env": {..}, "stdin": <n>}\n<n bytes>
// and says `took` (the dispatcher writes "137" to <base>/<k>/status.<relay>:
// from here on the call counts as run), hands the request to its scope
// and says the exit code once the scope has ended (its event loop ran dry,
// process.exit(), an uncaught error, or its heap bound). The dispatcher
// writes the code to the status file, then `done <relay>` on the slot's
// `life`. The budget is the dispatcher's, counted from the relay's line:
// at the deadline it kills the server's session, writes `timeout`, and
// starts another server. A server that ends (its call killed it) costs
// only its call; another takes its place.
//
// Root's part reads nothing the guest wrote but the servers' IPC messages,
// which move a call along only when they carry that call's nonce and fit
// its state. The worker prepends `const WRAPPERS = [<wrapper source>, ...]`
// and guest/node/serving.mjs (writeAll, fdStream, reopen, …).
import { spawn } from 'node:child_process';
import { Console } from 'node:console';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import { builtinModules, createRequire, isBuiltin } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { inspect } from 'node:util';
import vm from 'node:vm';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

const TAIL = 'await main();';
const SDK_FILE = `${process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk'}/dist/index.mjs`;
const WRAPPER_TEXTS = typeof WRAPPERS === 'undefined' ? [] : WRAPPERS;
// (Bounds what one VM's fill may ask: a slot per call at once, and one.)
const MAX_KEEP = 65;

function keepOf(text) {
  const n = Number.parseInt(text, 10);
  return Number.isInteger(n) ? Math.min(MAX_KEEP, Math.max(2, n)) : 2;
}

// ---- the dispatcher (root) ----

async function dispatch() {
  // A server's IPC channel is the guest's to write: a line that is not
  // JSON throws in node's own channel reader, and must not end root's
  // dispatcher. Anything else that escapes is a fault of this file: the
  // dispatcher ends, relays say `cold`, and the next fill starts another.
  process.on('uncaughtException', (e) => {
    if (!(e instanceof SyntaxError)) process.exit(70);
  });
  const [base, keepArg, uidArg, gidArg] = process.argv.slice(3);
  const ids = uidArg === '-' ? null : { uid: Number(uidArg), gid: Number(gidArg) };
  const wrappers = writeWrappers(path.join(base, 'wrappers'));
  const pool = new Pool({ base, ids, wrappers, keep: keepOf(keepArg) });
  pool.fill();
  let pending = '';
  const inbox = new net.Socket({ fd: 3, readable: true, writable: false });
  inbox.setEncoding('ascii');
  inbox.on('data', (chunk) => {
    pending += chunk;
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      try { pool.said(line); } catch { /* one call lost, the rest served */ }
    }
    if (pending.length > 4096) pending = '';
  });
}

// Each wrapper's definitions (all but its last line, `await main();`), in
// root's directory for every server to import ahead.
function writeWrappers(dir) {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const files = [];
  for (const [i, text] of WRAPPER_TEXTS.entries()) {
    const body = text.trimEnd();
    if (!body.endsWith(TAIL)) continue;
    const file = path.join(dir, `wrapper-${i}.mjs`);
    try {
      fs.writeFileSync(`${file}.${process.pid}`, `${body.slice(0, -TAIL.length)}export { main };\n`, { mode: 0o644 });
      fs.renameSync(`${file}.${process.pid}`, file);
      files.push(file);
    } catch { /* that wrapper runs from its text */ }
  }
  return dir;
}

// The servers, the slots' calls and what each is doing.
class Pool {
  constructor({ base, ids, wrappers, keep }) {
    Object.assign(this, { base, ids, wrappers, keep });
    this.servers = new Set();
    this.queue = [];
    this.lives = new Map(); // slot → its `life`, read-write
    this.last = new Map(); // slot → the status file its last call left
    this.failures = 0;
  }

  // One line on `in`: `<relay pid> <budget ms> <slot>` from a relay, or
  // `keep <n>` from a fill (a VM's slots only grow).
  said(line) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'keep' && words.length === 2) {
      this.keep = Math.max(this.keep, keepOf(words[1]));
      this.fill();
      return;
    }
    const [relay, budget, slot] = words.map((w) => (/^\d{1,9}$/.test(w) ? Number(w) : NaN));
    if (words.length !== 3 || !(relay > 0) || !(budget > 0) || !(slot < MAX_KEEP)) return;
    const call = { relay, slot, nonce: randomBytes(16).toString('hex'), server: null, took: false, over: false };
    call.timer = setTimeout(() => this.expire(call), budget);
    this.queue.push(call);
    this.next();
  }

  fill() {
    while (this.servers.size < this.keep) this.start();
    this.report();
  }

  start() {
    // (vm.SourceTextModule, a call's fresh context's modules, is behind a flag.)
    const child = spawn(process.execPath, ['--experimental-vm-modules', process.argv[1], 'serve', this.wrappers, String(this.keep)], {
      ...(this.ids ?? {}),
      cwd: '/tmp',
      detached: true,
      stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      serialization: 'json',
    });
    const server = { child, ready: false, call: null, served: 0, inContexts: 0, dying: false };
    this.servers.add(server);
    child.on('error', () => { /* its exit says it */ });
    child.on('message', (m) => this.heard(server, m));
    child.on('exit', (code, signal) => this.ended(server, code, signal));
  }

  // What a server says: `ready` (a fresh scope waits), `took`, `untaken`
  // or `code` (of the call it carries the nonce of). Anything else, or out
  // of turn, ends it.
  heard(server, m) {
    if (server.dying) return;
    const call = server.call;
    const { say: kind, nonce } = m && typeof m === 'object' ? m : {};
    if (kind === 'ready' && call === null && !server.ready) {
      server.ready = true;
      this.failures = 0;
      this.next();
      return;
    }
    if (call !== null && nonce === call.nonce) {
      if (kind === 'took' && !call.took) {
        call.took = true;
        this.status(call, '137');
        return;
      }
      if (kind === 'untaken' && !call.took) return this.end(server, call, null);
      if (kind === 'code' && call.took && Number.isInteger(m.code)) {
        if (m.context === true) server.inContexts++;
        return this.end(server, call, String(m.code & 0xff));
      }
    }
    this.kill(server);
  }

  ended(server, code, signal) {
    this.servers.delete(server);
    const call = server.call;
    if (call !== null) {
      const sig = signal ? os.constants.signals[signal] ?? 9 : 0;
      this.end(server, call, call.took ? String(signal ? 128 + sig : code & 0xff) : null);
    } else if (server.served === 0 && !server.ready && ++this.failures >= 3) {
      // Servers that cannot start three times in a row will not: relays
      // find no dispatcher and run cold, and a fill starts one anew.
      process.exit(97);
    }
    this.fill();
  }

  kill(server) {
    server.dying = true;
    server.ready = false;
    try { process.kill(-server.child.pid, 'SIGKILL'); } catch { /* gone */ }
  }

  // The oldest waiting call to a server with a fresh scope ready.
  next() {
    for (const server of this.servers) {
      if (this.queue.length === 0) break;
      if (!server.ready) continue;
      this.hand(server, this.queue.shift());
    }
    this.report();
  }

  hand(server, call) {
    server.ready = false;
    server.call = call;
    call.server = server;
    server.served++;
    let streams;
    try {
      streams = [[7, 'w'], [8, 'w'], [6, 'r']].map(([fd, flag]) => this.stream(call.relay, fd, flag));
    } catch {
      // The relay is gone, or its streams are not pipes: nothing ran.
      server.ready = true;
      server.call = null;
      server.served--;
      this.finish(call, null);
      return;
    }
    const [out, err, input] = streams;
    for (const [i, s] of [out, err].entries()) {
      server.child.send({ say: 'call', nonce: call.nonce, stream: i + 1 }, s, () => {});
    }
    // The request is read here (one handle fewer to send, each a round
    // trip), off the event loop's way, and sent on whole.
    const request = (bytes) => {
      if (server.call !== call) return;
      server.child.send({ say: 'call', nonce: call.nonce, stream: 0, bytes: bytes.toString('base64') });
    };
    if (Buffer.isBuffer(input)) return request(input);
    const chunks = [];
    input.on('data', (c) => chunks.push(c));
    input.on('error', () => input.destroy());
    input.on('close', () => request(Buffer.concat(chunks)));
  }

  // The relay's fd <fd>, opened through /proc (root's): a pipe, as a
  // handle IPC can send; the output pipes made the guest's, for the server
  // to reopen as its fds 1 and 2. (An input that is a file is read here:
  // it never blocks.)
  stream(relay, fd, flag) {
    const n = fs.openSync(`/proc/${relay}/fd/${fd}`, flag);
    try {
      const stat = fs.fstatSync(n);
      if (flag === 'r' && stat.isFile()) {
        const bytes = fs.readFileSync(n);
        fs.closeSync(n);
        return bytes;
      }
      if (!stat.isFIFO()) throw new Error('not a pipe');
      if (flag === 'w' && this.ids) fs.fchownSync(n, this.ids.uid, this.ids.gid);
      return new net.Socket({ fd: n, readable: flag === 'r', writable: false });
    } catch (e) {
      fs.closeSync(n);
      throw e;
    }
  }

  expire(call) {
    if (call.over) return;
    if (call.server === null) {
      // Never handed (no server was ready): nothing ran.
      this.queue = this.queue.filter((c) => c !== call);
      this.finish(call, null);
      return;
    }
    const server = call.server;
    this.end(server, call, 'timeout');
    this.kill(server);
  }

  // `call` is over for `server` (which waits for its next scope, unless
  // it was killed), with `said` in its status file (null: nothing ran).
  end(server, call, said) {
    if (server.call === call) server.call = null;
    this.finish(call, said);
    this.next();
  }

  finish(call, said) {
    if (call.over) return;
    call.over = true;
    clearTimeout(call.timer);
    if (said !== null) this.status(call, said);
    try {
      fs.writeSync(this.life(call.slot), `done ${call.relay}\n`);
    } catch { /* its relay is gone, or the FIFO is full of lines no relay read */ }
  }

  status(call, said) {
    const dir = path.join(this.base, String(call.slot));
    const file = path.join(dir, `status.${call.relay}`);
    const before = this.last.get(call.slot);
    if (before !== undefined && before !== file) fs.rmSync(before, { force: true });
    this.last.set(call.slot, file);
    try { fs.writeFileSync(file, said, { mode: 0o600 }); } catch { /* its slot is gone */ }
  }

  life(slot) {
    let fd = this.lives.get(slot);
    if (fd === undefined) {
      const file = path.join(this.base, String(slot), 'life');
      fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_NONBLOCK);
      this.lives.set(slot, fd);
    }
    return fd;
  }

  // <base>/servers: each server's pid, whether it waits with a fresh
  // scope, the calls it took and how many of them ran in a fresh context
  // (for a look from outside; nothing reads it on a call's path).
  report() {
    const text = [...this.servers].map((s) => `${s.child.pid} ${s.ready ? 'ready' : s.call ? 'busy' : 'starting'} ${s.served} ${s.inContexts}\n`).join('');
    if (text === this.reported) return;
    this.reported = text;
    const file = path.join(this.base, 'servers');
    try {
      fs.writeFileSync(`${file}.new`, text);
      fs.renameSync(`${file}.new`, file);
    } catch { /* a look from outside misses one */ }
  }
}

// ---- a server (the guest user) ----

async function serve() {
  const [wrappersDir, keepArg] = process.argv.slice(3);
  // The dispatcher gone, so is this server (and the call it runs).
  process.on('disconnect', () => process.reallyExit(0));
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), '.scr-scope-'));
  const wrappers = [];
  for (const [i] of WRAPPER_TEXTS.entries()) {
    const file = path.join(wrappersDir, `wrapper-${i}.mjs`);
    if (fs.existsSync(file)) wrappers.push({ i, file });
  }
  // Every slot's scope may hold this much heap at once and the VM keeps a
  // quarter: a call over it ends alone (ERR_WORKER_OUT_OF_MEMORY), and the
  // kernel's OOM killer never has to pick among the other calls.
  const keep = keepOf(keepArg);
  // (SCR_SCOPE_HEAP_MB sets it, for tests on a host.)
  const heapMb = Number.parseInt(process.env.SCR_SCOPE_HEAP_MB, 10)
    || Math.max(64, Math.floor((os.totalmem() / 2 ** 20) * 0.75 / (keep - 1)));
  delete process.env.SCR_SCOPE_HEAP_MB;
  const realm = realmServing();
  await realm.warm();
  const calls = callsFromDispatcher();
  let sdk = true; // a guess, until a call says what the calls here use
  let next = null; // a worker thread started ahead, for a call a context cannot take
  let threads = false; // whether the last call needed one
  let failures = 0;
  for (;;) {
    if (threads) {
      next ??= start({ dir: scratch, wrappers, heapMb, sdk: sdk && fs.existsSync(SDK_FILE) });
      if (!(await next.loaded)) {
        next = null;
        // A scope that cannot load three times in a row will not: this
        // server ends, and the dispatcher starts another.
        if (++failures >= 3) process.reallyExit(97);
        continue;
      }
      failures = 0;
    }
    process.send({ say: 'ready' });
    const call = await calls.next();
    const taken = await takeStreams(call.streams);
    if (taken === null) {
      process.send({ say: 'untaken', nonce: call.nonce });
      continue;
    }
    process.send({ say: 'took', nonce: call.nonce });
    const { req, data } = taken;
    let ran = await realm.run(req, data, next);
    const context = ran !== null;
    threads = !context;
    if (ran === null) {
      next ??= start({ dir: scratch, wrappers, heapMb, sdk: sdk && fs.existsSync(SDK_FILE) });
      const code = (await next.loaded) ? await next.run({ script: req.script, env: req.env || {}, data }) : 1;
      ran = { code, clean: true };
      next = null;
      realm.thread();
    }
    reopen(1, '/dev/null');
    reopen(2, '/dev/null');
    const said = { say: 'code', nonce: call.nonce, code: ran.code, context };
    // A server a call changed is not another call's: it ends once the
    // dispatcher has the code, and another takes its place.
    if (!ran.clean) {
      process.send(said, () => process.reallyExit(0));
      return;
    }
    process.send(said);
    // What the call left open retires the server once it has answered.
    if (context && !(await realm.settled())) process.reallyExit(0);
    sdk = namesIii(data);
  }
}

// The server's side of calls in fresh contexts (guest/node/realm.mjs).
function realmServing() {
  let current = null; // the call in a context now: { crash, drained }
  const crash = (e) => {
    if (current === null) process.reallyExit(70);
    current.crash(e);
  };
  process.on('uncaughtException', crash);
  process.on('unhandledRejection', crash);
  // A call's event loop ran dry: with the server's own handles unref'd
  // while it runs, that is the call's own work done.
  process.on('beforeExit', () => current?.drained());
  // What the server holds when idle (its IPC channel, …): a call that
  // leaves more (a socket, a watcher, a child) leaves it to no later call.
  let baseline = null;
  const counts = () => {
    const n = new Map();
    for (const r of process.getActiveResourcesInfo()) n.set(r, (n.get(r) ?? 0) + 1);
    return n;
  };
  const leftNothing = () => [...counts()].every(([r, k]) => k <= (baseline.get(r) ?? 0));
  return {
    // Ahead of the first call: the SDK (what `iii` loads) and the one
    // warning the flag's first use prints, while fd 2 is /dev/null.
    async warm() {
      if (fs.existsSync(SDK_FILE)) {
        try { await import(pathToFileURL(SDK_FILE).href); } catch { /* the call's `iii` explains */ }
      }
      new vm.SourceTextModule('', { context: vm.createContext({}) });
      await new Promise((resolve) => setImmediate(resolve));
      baseline = counts();
    },
    // Whether everything the last call opened has closed, given up to
    // `ms` once it answered (a client it shut down closes its socket a
    // moment later; on a loaded host, later still): what is still open
    // then was left behind, and the server is no later call's. A call that
    // leaves nothing is ready again at once; one that leaves something
    // costs this server a second, which the slot's spare covers.
    async settled(ms = 1000) {
      // (Past one loop's close phase: the call's streams this server let
      // go of are closed by then.)
      for (let i = 0; i < 2; i++) await new Promise((resolve) => setImmediate(resolve));
      const until = Date.now() + ms;
      while (!leftNothing()) {
        if (Date.now() >= until) return false;
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      return true;
    },
    // A handler call (the invoke wrapper's, WRAPPERS[1]) in a fresh
    // context: { code, clean }, or null where a thread must take it
    // (nothing of it ran).
    async run(req, data, thread) {
      if (req.script !== WRAPPER_TEXTS[1] || typeof callInRealm !== 'function') return null;
      let invoke;
      try {
        invoke = JSON.parse(Buffer.from(data).toString('utf8'));
      } catch {
        return null;
      }
      if (typeof invoke?.secret !== 'string' || !/^[0-9a-f]{32}$/.test(invoke.secret) || typeof invoke.module !== 'string') return null;
      let drained;
      current = { drained: null, crash: (e) => current.call?.crash(e) };
      const dry = new Promise((resolve) => { drained = resolve; });
      current.drained = drained;
      process.channel?.unref();
      thread?.worker.unref();
      try {
        return await callInRealm(invoke, req.env || {}, dry, (call) => { current.call = call; });
      } catch (e) {
        if (e instanceof NotHere) return null;
        throw e;
      } finally {
        current = null;
        process.channel?.ref();
        thread?.worker.ref();
      }
    },
    // A call ran in a thread: what node's objects look like is taken anew.
    thread() {
      shapes = null;
    },
  };
}

// The dispatcher's calls, each once its three streams have come (a nonce
// that changes midway drops the streams so far).
function callsFromDispatcher() {
  let current = null;
  const ready = [];
  let wake = null;
  process.on('message', (m, handle) => {
    if (!m || m.say !== 'call' || !(handle || (m.stream === 0 && typeof m.bytes === 'string'))) return;
    if (!handle) handle = Readable.from([Buffer.from(m.bytes, 'base64')]);
    handle.on('error', () => { /* a write end read from: its fd is reopened, then closed */ });
    if (current === null || current.nonce !== m.nonce) {
      current?.streams.forEach((s) => s?.destroy());
      current = { nonce: m.nonce, streams: [null, null, null] };
    }
    current.streams[m.stream] = handle;
    if (current.streams.every((s) => s !== null)) {
      ready.push(current);
      current = null;
      wake?.();
    }
  });
  return {
    async next() {
      while (ready.length === 0) await new Promise((resolve) => { wake = resolve; });
      wake = null;
      return ready.shift();
    },
  };
}

// A call's streams taken: the output pipes as fds 1 and 2 (first: one that
// cannot be taken leaves the call untaken), then the request read whole
// off the input. null if any of it fails (fds 1 and 2 are /dev/null again).
async function takeStreams([input, out, err]) {
  try {
    reopen(1, `/proc/self/fd/${out._handle.fd}`);
    reopen(2, `/proc/self/fd/${err._handle.fd}`);
    out.destroy();
    err.destroy();
    const chunks = [];
    for await (const c of input) chunks.push(c);
    const buf = Buffer.concat(chunks);
    const nl = buf.indexOf(10);
    const req = JSON.parse(buf.subarray(0, nl).toString('utf8'));
    const data = buf.subarray(nl + 1, nl + 1 + Number(req.stdin));
    return { req, data };
  } catch {
    for (const s of [input, out, err]) s.destroy();
    reopen(1, '/dev/null');
    reopen(2, '/dev/null');
    return null;
  }
}

// A scope started ahead: `loaded` resolves true once it waits for its
// call, false if it ended before; `run` hands it a call and resolves to
// its exit code.
function start({ dir, wrappers, heapMb, sdk }) {
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { dir, wrappers, sdk },
    argv: [],
    resourceLimits: { maxOldGenerationSizeMb: heapMb },
  });
  let failure = null;
  const ended = new Promise((resolve) => worker.once('exit', resolve));
  worker.on('error', (e) => { failure ??= e; });
  const loaded = Promise.race([
    new Promise((resolve) => worker.once('message', () => resolve(true))),
    ended.then(() => false),
  ]);
  return {
    worker,
    loaded,
    async run(request) {
      worker.postMessage(request);
      const code = await ended;
      if (failure !== null) writeAll(2, `${uncaught(failure, heapMb)}\n`);
      return failure !== null && code === 0 ? 1 : code;
    },
  };
}

// Whether a call's code names `iii`: a run's code is its stdin; a handler
// call's stdin names the module, read here (the guest may read it).
function namesIii(data) {
  const text = Buffer.from(data).toString('utf8');
  let code = text;
  try {
    const req = JSON.parse(text);
    if (req && typeof req.module === 'string') code = fs.readFileSync(req.module, 'utf8');
  } catch { /* a run's code */ }
  return /\biii\b/.test(code);
}

// The report of an error no code caught, as node prints one (without this
// server's own frames).
function uncaught(e, heapMb) {
  if (e && e.code === 'ERR_WORKER_OUT_OF_MEMORY') {
    return `${e.message}: a call's heap is bounded at ${heapMb} MB in this VM`;
  }
  const text = e instanceof Error && typeof e.stack === 'string' ? e.stack : `Uncaught ${inspect(e)}`;
  const own = /\/\.scr\/scope\//;
  return `${text.split('\n').filter((l) => !(/^\s+at /.test(l) && own.test(l))).join('\n')}\n\nNode.js ${process.version}`;
}

// ---- a scope (worker thread) ----

async function scope() {
  const out = fdStream(1);
  const err = fdStream(2);
  Object.defineProperty(process, 'stdout', { configurable: true, enumerable: true, get: () => out });
  Object.defineProperty(process, 'stderr', { configurable: true, enumerable: true, get: () => err });
  process.argv.length = 1;
  const { dir, wrappers, sdk } = workerData;
  const loaded = new Map();
  for (const { i, file } of wrappers) {
    try {
      loaded.set(WRAPPER_TEXTS[i], await import(pathToFileURL(file).href));
    } catch { /* that wrapper runs from its text */ }
  }
  if (sdk) {
    try { await import(pathToFileURL(SDK_FILE).href); } catch { /* the call's `iii` explains */ }
  }
  parentPort.postMessage('loaded');
  const call = await new Promise((resolve) => parentPort.once('message', resolve));
  // From here the call's own work decides when this scope ends.
  parentPort.unref();
  Object.assign(process.env, call.env);
  const stdin = Readable.from([Buffer.from(call.data.buffer, call.data.byteOffset, call.data.byteLength)]);
  Object.defineProperty(process, 'stdin', { configurable: true, enumerable: true, get: () => stdin });
  const ahead = loaded.get(call.script);
  if (ahead) {
    await ahead.main();
  } else {
    const file = path.join(dir, `wrapper.${process.hrtime.bigint()}.mjs`);
    fs.writeFileSync(file, call.script, { mode: 0o600 });
    try {
      await import(pathToFileURL(file).href);
    } finally {
      fs.rmSync(file, { force: true });
    }
  }
}

// Last: every declaration above is initialized by now.
if (!isMainThread) await scope();
else if (process.argv[2] === 'dispatch') await dispatch();
else await serve();
