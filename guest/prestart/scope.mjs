// sandbox-code-runner: a node scope server (see scope.sh).
// argv: node <SCR_SCOPES>/scope.mjs <dir> <keep>, as the guest user, in its
// own session, cwd /tmp; fds 3 and 4 are <dir>'s `in` and `life` FIFOs
// (read-write, opened by root before the server's first moment); stdin,
// stdout and stderr are /dev/null. The worker prepends
// `const WRAPPERS = [<wrapper source>, ...]`.
//
// Each call runs in a fresh worker thread (a "scope": its own V8 isolate,
// so its own globals, module graph, `process.env` copy, listeners, exit
// code and heap), started ahead with each wrapper's definitions loaded
// (everything but its last line, `await main();`) and, when calls here use
// it, the iii SDK module. The server waits on fd 3 for a relay's guest half
// (its pid), reads the request from that half's fd 6
//   {"script": <a wrapper>, "env": {..}, "stdin": <n>}\n<n bytes>
// takes the exec's stdout and stderr as its own fds 1 and 2 (reopened
// through /proc/<pid>/fd/7 and 8: nothing is copied, and what the call
// starts with inherited stdio writes there too), writes "137" to
// status.<pid> (from here on the call counts as run), and hands the request
// to the scope. When the scope has ended (its event loop ran dry,
// process.exit(), an uncaught error, or its heap bound), the exit code
// replaces the "137", fds 1 and 2 go back to /dev/null, `done <pid>` goes
// on `life`, and the next scope starts. Root's relay keeps the budget (it
// kills this server's whole session at the deadline) and starts a new
// server when this one is gone.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { inspect } from 'node:util';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

// (guest/node/serving.mjs is put in front of this file by the worker:
// writeAll, fdStream, reopen, takeCall, writeStatus, nextRelay. The server alone
// opens anything while it reopens fds 1 and 2: the scope waits, or has
// ended.)

const TAIL = 'await main();';
const SDK_FILE = `${process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk'}/dist/index.mjs`;
const WRAPPER_TEXTS = typeof WRAPPERS === 'undefined' ? [] : WRAPPERS;


// ---- the server (main thread) ----

async function serve() {
  const [dir, keepArg] = process.argv.slice(-2);
  // `life` again, close-on-exec: what a call starts must not hold it (the
  // relay's half waits for a line there, and a server gone is its end).
  const life = fs.openSync(path.join(dir, 'life'), fs.constants.O_RDWR);
  fs.closeSync(4);
  const wrappers = [];
  for (const [i, text] of WRAPPER_TEXTS.entries()) {
    const body = text.trimEnd();
    if (!body.endsWith(TAIL)) continue;
    const file = path.join(dir, `wrapper-${i}.mjs`);
    try {
      fs.writeFileSync(file, `${body.slice(0, -TAIL.length)}export { main };\n`, { mode: 0o600 });
      wrappers.push({ i, file });
    } catch { /* that wrapper runs from its text */ }
  }
  // Every slot's scope may hold this much heap at once and the VM keeps a
  // quarter: a call over it ends alone (ERR_WORKER_OUT_OF_MEMORY), and the
  // kernel's OOM killer never has to pick among the other calls.
  const keep = Math.max(2, Number.parseInt(keepArg, 10) || 2);
  // (SCR_SCOPE_HEAP_MB sets it, for tests on a host.)
  const heapMb = Number.parseInt(process.env.SCR_SCOPE_HEAP_MB, 10)
    || Math.max(64, Math.floor((os.totalmem() / 2 ** 20) * 0.75 / (keep - 1)));
  delete process.env.SCR_SCOPE_HEAP_MB;
  const ready = path.join(dir, 'ready');
  let sdk = true; // a guess, until a call says what the calls here use
  let next = null;
  let failures = 0;
  for (;;) {
    next ??= start({ dir, wrappers, heapMb, sdk: sdk && fs.existsSync(SDK_FILE) });
    if (!(await next.loaded)) {
      next = null;
      // A scope that cannot load three times in a row will not: the relay
      // finds no live server, the call runs cold, and a fill starts anew.
      if (++failures >= 3) process.reallyExit(97);
      continue;
    }
    failures = 0;
    fs.writeFileSync(ready, '');
    const relay = await nextRelay();
    fs.rmSync(ready, { force: true });
    const taken = await serveCall(dir, relay, next, life);
    if (taken !== null) {
      next = null;
      sdk = taken;
    }
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
    loaded,
    async run(request) {
      worker.postMessage(request);
      const code = await ended;
      if (failure !== null) writeAll(2, `${uncaught(failure, heapMb)}\n`);
      return failure !== null && code === 0 ? 1 : code;
    },
  };
}

// One relay's call, or null if it could not be taken (nothing ran: no
// status says otherwise, and the relay says so). Otherwise whether the
// call's code names `iii`, which decides whether the next scope loads the
// SDK ahead.
async function serveCall(dir, relay, scope, life) {
  const taken = takeCall(dir, relay);
  if (taken === null) {
    say(life, relay);
    return null;
  }
  const { req, data, status } = taken;
  const code = await scope.run({ script: req.script, env: req.env || {}, data });
  writeStatus(status, code);
  fs.closeSync(status);
  reopen(1, '/dev/null');
  reopen(2, '/dev/null');
  say(life, relay);
  return namesIii(data);
}

function say(life, relay) {
  try { fs.writeSync(life, `done ${relay}\n`); } catch { /* the relay is gone */ }
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
if (isMainThread) await serve(); else await scope();
