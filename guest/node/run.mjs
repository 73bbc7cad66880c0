// sandbox-code-runner: node RUN wrapper.
// argv: node --input-type=module -e <this file>   (cwd /tmp)
// stdin: the user's code, verbatim.  env: III_URL, SCR_WORKER_NAME.
// The user's code runs as an ES module from a real file so that top-level
// await works and bare imports resolve through /tmp/node_modules and
// /node_modules like `node main.mjs` would. Its stdout/stderr and exit code
// are its own; an uncaught throw prints Node's usual report and exits 1.
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { builtinModules, createRequire } from 'node:module';
import { inspect } from 'node:util';
import { pathToFileURL } from 'node:url';

// ---- BEGIN shared (identical in run.mjs and invoke.mjs; guest/tests checks) ----
// `node -e` defines every builtin module as a global (fs, path, module, …);
// remove those so user code sees the globals of a plain `node main.mjs`.
function dropEvalGlobals(builtins) {
  for (const name of builtins) {
    if (['process', 'crypto', 'console'].includes(name)) continue;
    const d = Object.getOwnPropertyDescriptor(globalThis, name);
    if (d && d.configurable && d.get) delete globalThis[name];
  }
}

// Installs globalThis.iii: a facade over the npm iii-sdk client that creates
// the client (and so connects) only on first real use. Introspection never
// connects. Returns an async closer the wrapper awaits once the code is done.
function installIii(sourceText, defaultName) {
  // Where the worker plants the bundle; overridable for tests on a host.
  const SDK_DIR = process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk';
  const SDK_FILE = `${SDK_DIR}/dist/index.mjs`;
  const SURFACE = ['trigger', 'registerFunction', 'registerTrigger',
    'registerTriggerType', 'unregisterTriggerType', 'shutdown'];
  // Two guests must never share a worker name: the engine closes the second.
  const workerName = `${process.env.SCR_WORKER_NAME || defaultName}:${randomBytes(3).toString('hex')}`;
  const HINT = [
    'iii: the iii-sdk client (npm iii-sdk 0.22.1), connected lazily on first use',
    "  const r = await iii.trigger({ function_id: 'engine::functions::list', payload: {} })",
    "  iii.registerFunction('ns::fn', async (payload) => ({ ok: true }))  // lives only while this process runs",
    `  methods: ${SURFACE.join(', ')}`,
  ].join('\n');
  let sdk = null;
  let loadError = null;
  let client = null;

  // The SDK reads ../package.json relative to itself; the worker plants only
  // the bundle, so supply a package.json whose exports point at it.
  function ensurePackageJson() {
    const pj = `${SDK_DIR}/package.json`;
    if (fs.existsSync(pj) || !fs.existsSync(SDK_FILE)) return;
    try {
      fs.writeFileSync(pj, JSON.stringify({
        name: 'iii-sdk', version: '0.22.1', type: 'module',
        main: './dist/index.mjs', exports: { '.': './dist/index.mjs' },
      }));
    } catch { /* read-only: the import below reports the problem */ }
  }

  // Importing the bundle costs ~100 ms, so it is done ahead only when the
  // source names `iii`; that also lets iii.* calls below be synchronous.
  const ready = /\biii\b/.test(sourceText) && fs.existsSync(SDK_FILE)
    ? (ensurePackageJson(), import(pathToFileURL(SDK_FILE).href).then((m) => { sdk = m; }, (e) => { loadError = e; }))
    : Promise.resolve();

  function getClient() {
    if (client) return client;
    if (!sdk && !loadError && fs.existsSync(SDK_FILE)) {
      // Reached through code the regex did not see (e.g. an imported file):
      // load synchronously via require(esm) where this Node supports it.
      try { ensurePackageJson(); sdk = createRequire(SDK_FILE)(SDK_FILE); } catch (e) { loadError = e; }
    }
    if (!sdk) {
      throw new Error(`iii-sdk is not available in this runtime (${SDK_FILE} ${
        loadError ? `failed to load: ${loadError.message}` : 'is missing'}); the iii global cannot connect`);
    }
    client = sdk.registerWorker(process.env.III_URL || 'ws://127.0.0.1:49134', {
      workerName,
      otel: { enabled: false },
      enableMetricsReporting: false,
    });
    return client;
  }

  const target = {};
  for (const name of SURFACE) {
    target[name] = (...args) => (name === 'shutdown' && !client ? Promise.resolve() : getClient()[name](...args));
  }
  const describe = () => (client ? `iii: iii-sdk client, worker ${workerName}\n  methods: ${SURFACE.join(', ')}` : HINT);
  Object.defineProperties(target, {
    [inspect.custom]: { value: describe },
    [Symbol.toPrimitive]: { value: describe },
    toString: { value: describe },
    toJSON: { value: describe },
  });
  // Known names come from the facade; anything else is forwarded to the real
  // client (a real use). `then` stays undefined so `await iii` is harmless.
  const facade = new Proxy(target, {
    get(t, prop) {
      if (prop in t) return t[prop];
      if (typeof prop === 'symbol' || prop === 'then') return undefined;
      const c = getClient();
      const v = c[prop];
      return typeof v === 'function' ? v.bind(c) : v;
    },
  });
  Object.defineProperty(globalThis, 'iii', { value: facade, writable: true, configurable: true });

  // Waits for triggers still in flight (as plain node would keep running for
  // them), then shuts the client down within `ms`. Resolves false if the
  // shutdown did not finish in time.
  async function close(ms) {
    if (!client) return true;
    while (client.invocations instanceof Map && client.invocations.size > 0) {
      await new Promise((r) => setTimeout(r, 10));
    }
    let timer;
    const timeout = new Promise((r) => { timer = setTimeout(() => r(false), ms); });
    const done = Promise.resolve().then(() => client.shutdown()).then(() => true, () => true);
    const ok = await Promise.race([done, timeout]);
    clearTimeout(timer);
    return ok;
  }
  return { ready, close };
}
// ---- END shared ----

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

dropEvalGlobals(builtinModules);
const code = await readStdin();
const iiiGlobal = installIii(code, 'sandbox-code-runner:run');

// Next to the cwd so that relative imports and import.meta behave as for a
// file the user wrote there; hidden, private, and removed afterwards.
let dir = process.cwd();
try { fs.accessSync(dir, fs.constants.W_OK); } catch { dir = '/tmp/.scr'; fs.mkdirSync(dir, { recursive: true, mode: 0o700 }); }
// Runs on one runtime are serialized, so a leftover from a killed run (older
// than a minute) is safe to sweep.
for (const f of fs.readdirSync(dir)) {
  if (!/^\.scr-run-[0-9a-f]+\.mjs$/.test(f)) continue;
  try { if (Date.now() - fs.statSync(path.join(dir, f)).mtimeMs > 60_000) fs.unlinkSync(path.join(dir, f)); } catch { /* raced */ }
}
const file = path.join(dir, `.scr-run-${randomBytes(6).toString('hex')}.mjs`);
fs.writeFileSync(file, code, { mode: 0o600, flag: 'wx' });
const removeFile = () => { try { fs.unlinkSync(file); } catch { /* already gone */ } };
process.on('exit', removeFile); // process.exit() in user code skips the finally below

await iiiGlobal.ready;
let failure = null;
try {
  await import(pathToFileURL(file).href);
} catch (e) {
  failure = { e };
} finally {
  removeFile();
}
if (!(await iiiGlobal.close(2000))) process.exit(failure ? 1 : (process.exitCode ?? 0));
// Rethrown at top level so Node prints its usual uncaught-error report and exits 1.
if (failure) throw failure.e;
