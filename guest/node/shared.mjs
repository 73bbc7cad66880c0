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

  // III_URL, plus the run's guest-listener token when the worker gave one.
  function engineUrl() {
    let url = process.env.III_URL || 'ws://127.0.0.1:49134';
    const token = process.env.III_GUEST_TOKEN;
    if (!token) return url;
    if (!url.split('://').pop().includes('/')) url += '/';
    return `${url}${url.includes('?') ? '&' : '?'}token=${token}`;
  }

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
