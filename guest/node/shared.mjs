// sandbox-code-runner: the prelude of both node wrappers (run.mjs and
// invoke.mjs). The worker sends `shared.mjs + <wrapper>` as one `node -e`
// script, so these functions use the wrapper's imports (import
// declarations are hoisted) and are defined once for both.
// `node -e` defines every builtin module as a global (fs, path, module, …);
// remove those so user code sees the globals of a plain `node main.mjs`.
function dropEvalGlobals(builtins) {
  for (const name of builtins) {
    if (['process', 'crypto', 'console'].includes(name)) continue;
    const d = Object.getOwnPropertyDescriptor(globalThis, name);
    if (d && d.configurable && d.get) delete globalThis[name];
  }
}

// Becomes the guest before any guest code runs. An exec runs as root in the
// VM, and the image's rootfs is shared by every VM of the image: so, as
// root, the worker's own directory (/tmp/.scr) must be root's and the SDK's
// package.json is written, then the process drops for good to the image's
// unprivileged user (numeric ids, so an image without a passwd entry for
// them works too; SCR_GUEST_USER=uid:gid overrides), who cannot write the
// image. HOME, the caches and npm's global prefix then live in the guest's
// own directory under the VM's private /tmp (SCR_GUEST_HOME, default
// /tmp/home). Exits 1 rather than run guest code as root. (A sandbox whose
// user namespace maps one id only has no other user to become: there the
// code runs as that one.)
function asGuest(defaultUid, defaultGid) {
  const refuse = (why) => {
    fs.writeSync(2, `sandbox-code-runner: not running guest code as root: ${why}\n`);
    process.exit(1);
  };
  const spec = process.env.SCR_GUEST_USER || `${defaultUid}:${defaultGid}`;
  const ids = /^(\d+):(\d+)$/.exec(spec);
  const [uid, gid] = ids ? [Number(ids[1]), Number(ids[2])] : [0, 0];
  if (!(uid > 0 && gid > 0)) refuse(`SCR_GUEST_USER=${JSON.stringify(spec)} is not <uid>:<gid> of a user other than root`);
  if (process.geteuid() === 0) {
    // The worker's files in the VM are root's; no guest may own their
    // directory (guest code first runs after this).
    const own = process.env.SCR_WORKER_DIR || '/tmp/.scr';
    try {
      fs.mkdirSync(own, { mode: 0o755 });
      fs.chmodSync(own, 0o755);
    } catch (e) {
      if (e.code !== 'EEXIST') refuse(`cannot create ${own}: ${e.message}`);
    }
    const st = fs.lstatSync(own);
    if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022)) refuse(`${own} is not a directory only root may change`);
    if ((st.mode & 0o005) !== 0o005) fs.chmodSync(own, 0o755); // the guest reads handler sources under it
    ensureSdkPackageJson();
    if (!oneIdOnly()) {
      try {
        process.setgroups([]);
        process.setgid(gid);
        process.setuid(uid);
      } catch (e) {
        refuse(`cannot become uid ${uid} gid ${gid}: ${e.message}`);
      }
      // (Node's getgroups() always lists the effective group.)
      if (process.getuid() !== uid || process.geteuid() !== uid || process.getgid() !== gid
        || process.getegid() !== gid || process.getgroups().some((g) => g !== gid)) {
        refuse(`still uid ${process.geteuid()} gid ${process.getegid()}`);
      }
    }
  }
  const home = guestEnv(process.env);
  try { fs.mkdirSync(home, { recursive: true, mode: 0o700 }); } catch { /* the guest's tools say so */ }
}

// The guest's HOME, caches, npm prefix and PATH set in `env`; its HOME.
function guestEnv(env) {
  const home = env.SCR_GUEST_HOME || '/tmp/home';
  const prefix = path.join(home, '.npm-global');
  Object.assign(env, { HOME: home, XDG_CACHE_HOME: path.join(home, '.cache'), NPM_CONFIG_PREFIX: prefix });
  const dirs = (env.PATH || '').split(':').filter(Boolean);
  for (const bin of [path.join(home, '.local', 'bin'), path.join(prefix, 'bin')]) {
    if (!dirs.includes(bin)) dirs.push(bin);
  }
  env.PATH = dirs.join(':');
  return home;
}

// Whether this process's user namespace maps one id only (then no other
// user exists to become).
function oneIdOnly() {
  let rows;
  try {
    rows = fs.readFileSync('/proc/self/uid_map', 'utf8').split('\n').filter((l) => l.trim()).map((l) => l.trim().split(/\s+/));
  } catch { return false; }
  return rows.length === 1 && rows[0][2] === '1';
}

// Where the worker plants the bundle; overridable for tests on a host.
function sdkPaths() {
  const dir = process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk';
  return { dir, file: `${dir}/dist/index.mjs` };
}

// The SDK reads ../package.json relative to itself; the worker plants only
// the bundle, so supply a package.json whose exports point at it (as root,
// before the drop: the guest may not write the SDK's directory).
function ensureSdkPackageJson() {
  const { dir, file } = sdkPaths();
  const pj = `${dir}/package.json`;
  if (fs.existsSync(pj) || !fs.existsSync(file)) return;
  try {
    fs.writeFileSync(pj, JSON.stringify({
      name: 'iii-sdk', version: '0.22.1', type: 'module',
      main: './dist/index.mjs', exports: { '.': './dist/index.mjs' },
    }));
  } catch { /* read-only: the import reports the problem */ }
}

// Installs globalThis.iii: a facade over the npm iii-sdk client that creates
// the client (and so connects) only on first real use. Introspection never
// connects. Returns an async closer the wrapper awaits once the code is done.
// (A call in a fresh context of a scope server gets it on that context's
// global, reading that call's env.)
function installIii(sourceText, defaultName, into = globalThis, env = process.env) {
  const { file: SDK_FILE } = sdkPaths();
  const SURFACE = ['trigger', 'registerFunction', 'registerTrigger',
    'registerTriggerType', 'unregisterTriggerType', 'shutdown'];
  // Two guests must never share a worker name: the engine closes the second.
  const workerName = `${env.SCR_WORKER_NAME || defaultName}:${randomBytes(3).toString('hex')}`;
  const HINT = [
    'iii: the iii-sdk client (npm iii-sdk 0.22.1), connected lazily on first use',
    "  const r = await iii.trigger({ function_id: 'engine::functions::list', payload: {} })",
    "  iii.registerFunction('ns::fn', async (payload) => ({ ok: true }))  // lives only while this process runs",
    `  methods: ${SURFACE.join(', ')}`,
  ].join('\n');
  let sdk = null;
  let loadError = null;
  let client = null;

  // Importing the bundle costs ~100 ms, so it is done ahead only when the
  // source names `iii`; that also lets iii.* calls below be synchronous.
  const ready = /\biii\b/.test(sourceText) && fs.existsSync(SDK_FILE)
    ? (ensureSdkPackageJson(), import(pathToFileURL(SDK_FILE).href).then((m) => { sdk = m; }, (e) => { loadError = e; }))
    : Promise.resolve();

  // III_URL, plus the run's guest-listener token when the worker gave one.
  function engineUrl() {
    let url = env.III_URL || 'ws://127.0.0.1:49134';
    const token = env.III_GUEST_TOKEN;
    if (!token) return url;
    if (!url.split('://').pop().includes('/')) url += '/';
    return `${url}${url.includes('?') ? '&' : '?'}token=${token}`;
  }

  function getClient() {
    if (client) return client;
    if (!sdk && !loadError && fs.existsSync(SDK_FILE)) {
      // Reached through code the regex did not see (e.g. an imported file):
      // load synchronously via require(esm) where this Node supports it.
      try { ensureSdkPackageJson(); sdk = createRequire(SDK_FILE)(SDK_FILE); } catch (e) { loadError = e; }
    }
    if (!sdk) {
      throw new Error(`iii-sdk is not available in this runtime (${SDK_FILE} ${
        loadError ? `failed to load: ${loadError.message}` : 'is missing'}); the iii global cannot connect`);
    }
    client = sdk.registerWorker(engineUrl(), {
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
  Object.defineProperty(into, 'iii', { value: facade, writable: true, configurable: true });

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

// A writer of the wrapper's one frame on stdout (`\x1eSCR1 <secret> <kind>
// <json>`), built before any user code runs, from references that code
// cannot replace afterwards; the secret lives only in this closure. `ok` and
// `result` bodies come as JSON text already.
function frameWriter(secret, lead = '') {
  const writeSync = fs.writeSync.bind(fs);
  const toBuffer = Buffer.from.bind(Buffer);
  const stringify = JSON.stringify;
  let sent = false;
  return {
    get sent() { return sent; },
    send(kind, json) {
      if (sent) return;
      sent = true;
      const buf = toBuffer(`${lead}\x1eSCR1 ${secret} ${kind} ${kind === 'ok' || kind.startsWith('result') ? json : stringify(json)}\n`);
      for (let off = 0; off < buf.length;) {
        try {
          off += writeSync(1, buf, off, buf.length - off);
        } catch (e) {
          if (e.code !== 'EAGAIN') throw e;
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
        }
      }
    },
  };
}

// ---- a handler call's pieces (invoke.mjs's, and a scope server's fresh contexts) ----

const MAX_TEXT = 16 * 1024; // cap on an error's message/stack in the frame

function clip(s) {
  s = String(s);
  return s.length > MAX_TEXT ? `${s.slice(0, MAX_TEXT)}…[truncated]` : s;
}

// Stack frames of this wrapper (an eval'd module, or the copy a pre-started
// interpreter or a scope server loaded ahead, and theirs) are noise to the
// caller.
function userStack(stack) {
  return stack.split('\n').filter((l) => !/^\s+at .*(\[eval\d*\]|\/\.scr\/(pre|scope)\/)/.test(l)).join('\n');
}

function errorBody(type, e) {
  // (An Error of another context, a fresh scope's, is one too.)
  if (e instanceof Error || Object.prototype.toString.call(e) === '[object Error]') {
    const stack = typeof e.stack === 'string' ? { stack: clip(userStack(e.stack)) } : {};
    return { type, message: clip(`${e.name}: ${e.message}`), ...stack };
  }
  return { type, message: clip(`non-Error value thrown: ${inspect(e, { depth: 2 })}`) };
}

// A handler is the named export `handler`, or a default export that is a
// function or an object with a `handler` method.
function pickHandler(mod) {
  if (typeof mod.handler === 'function') return mod.handler;
  const d = mod.default;
  if (typeof d === 'function') return d;
  if (d && typeof d.handler === 'function') return d.handler.bind(d);
  return null;
}

// Lenient: a top-level `function handler` / `const handler =` that was
// never exported is the handler (loaded from a copy that exports it).
const UNEXPORTED_HANDLER = /^(?:async\s+)?function\s*\*?\s*handler\s*\(|^(?:const|let|var)\s+handler\s*=/m;

const NO_HANDLER = { type: 'no_handler', message: 'the module exports no handler: export a function `handler(payload)` (sync or async), or a default function' };
