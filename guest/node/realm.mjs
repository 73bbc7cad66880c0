// sandbox-code-runner: one handler call in a fresh V8 context of a scope
// server (guest/prestart/scope.mjs), instead of a fresh worker thread: a
// context costs well under a millisecond, a thread ~25 ms of CPU.
//
// What the call gets is what a fresh `node` process would give it, built
// per call: V8's own globals (its own Object, Array, Promise, JSON, …),
// node's globals (Buffer, URL, fetch, …, read through from the server),
// and its own `process` (its env, argv, exit code, listeners and exit),
// `console`, timers and `iii`. Its module graph is its own: the handler
// module and every module it imports are compiled into the context anew;
// node's builtins come as modules made for the call.
//
// Where that cannot hold, the call does not start here: a graph that
// reaches a package, a CommonJS file or a dynamic import (a regex over
// each module's text, so it errs towards a thread) runs in a worker
// thread as before; that is decided before any of its code runs.
//
// What a call could change of the server (node's shared objects, the
// server's cwd, a resource left open) is checked after it: a server that
// is not as it was retires, and the dispatcher starts another. The
// worker puts this file after shared.mjs and serving.mjs; it uses the
// imports of scope.mjs (vm, Console, EventEmitter, createRequire, …).

// A graph this path does not take, found before anything ran.
class NotHere extends Error {}

// What a source needs that only a real module loader gives.
const LOADER_ONLY = /\bimport\s*\(|\brequire\b|\bmodule\.exports\b|\bexports\.\w|\b__(?:file|dir)name\b/;

const V8_NAMES = new Set(vm.runInNewContext('Object.getOwnPropertyNames(globalThis)'));
// Node's own globals, which a context lacks; the call's own take the place
// of these.
const PER_CALL = new Set(['global', 'process', 'console', 'iii', 'setTimeout', 'setInterval',
  'setImmediate', 'clearTimeout', 'clearInterval', 'clearImmediate']);
const NODE_NAMES = Object.getOwnPropertyNames(globalThis).filter((n) => !V8_NAMES.has(n) && !PER_CALL.has(n));
// Process functions that change nothing of the server; any other one a
// call runs (chdir, umask, setuid, dlopen, …) retires the server after it.
const PROCESS_READS = new Set(['cwd', 'hrtime', 'memoryUsage', 'cpuUsage', 'resourceUsage',
  'uptime', 'nextTick', 'emitWarning', 'getuid', 'geteuid', 'getgid', 'getegid', 'getgroups',
  'kill', 'availableMemory', 'constrainedMemory', 'getActiveResourcesInfo', 'hasUncaughtExceptionCaptureCallback']);
const requireBuiltin = createRequire(import.meta.url);

// The shape of node's shared objects a call can reach (each global's and
// builtin's values, their prototypes, the host's intrinsics), taken before
// a call first can: a call that changed one leaves a server that retires.
class Shapes {
  constructor() {
    this.seen = new Map(); // object → [prototype, extensible, [key, value|get, set]…]
    for (const name of Object.getOwnPropertyNames(globalThis)) {
      const d = Object.getOwnPropertyDescriptor(globalThis, name);
      if ('value' in d) this.add(d.value, 1);
    }
    this.add(process, 1);
    this.add(globalThis); // (the server's realm is a constructor away)
  }

  add(o, depth = 0) {
    if (o === null || (typeof o !== 'object' && typeof o !== 'function') || this.seen.has(o)) return;
    this.seen.set(o, Shapes.shape(o));
    const p = Object.getOwnPropertyDescriptor(o, 'prototype');
    if (p && 'value' in p) this.add(p.value);
    if (depth > 0) {
      for (const key of Reflect.ownKeys(o)) {
        const d = Object.getOwnPropertyDescriptor(o, key);
        if (d && 'value' in d) this.add(d.value, depth - 1);
      }
    }
  }

  static shape(o) {
    const parts = [Object.getPrototypeOf(o), Object.isExtensible(o)];
    for (const key of Reflect.ownKeys(o)) {
      const d = Object.getOwnPropertyDescriptor(o, key);
      parts.push(key, 'value' in d ? d.value : d.get, d.set);
    }
    return parts;
  }

  // Whether every object is as it was (process.env, the server's own, is
  // not the call's and not compared).
  same() {
    for (const [o, before] of this.seen) {
      if (o === process.env) continue;
      const now = Shapes.shape(o);
      if (now.length !== before.length || now.some((v, i) => !Object.is(v, before[i]))) return false;
    }
    return true;
  }
}

let shapes = null;

// One handler call (`req` is the invoke wrapper's request, `env` the
// exec's env) in a fresh context; `drained` resolves if the event loop
// runs dry meanwhile, and `onCall` learns the call (for the server's
// uncaught errors). Resolves to { code, clean } (clean: the server is as
// it was and may serve again), or throws NotHere before anything of the
// call ran: a graph this path does not take, or one that does not load
// (a thread reports that as node does).
async function callInRealm(req, env, drained, onCall) {
  shapes ??= new Shapes();
  let call;
  let root;
  try {
    const source = fs.readFileSync(req.module, 'utf8');
    call = new RealmCall(env);
    root = await call.graph(req.module, source, '');
    if (pickNames(root.namespace) === null && UNEXPORTED_HANDLER.test(source)) {
      // As the wrapper's lenient reading: the same module, exporting it.
      call = new RealmCall(env);
      root = await call.graph(req.module, source, '\nexport { handler };\n');
    }
  } catch (e) {
    throw e instanceof NotHere ? e : new NotHere(String(e));
  }
  onCall(call);
  const frame = frameWriter(req.secret);
  const iiiGlobal = installIii(call.sources.join('\n'), 'sandbox-code-runner:fn', call.global, call.env);
  await iiiGlobal.ready;
  const ended = call.ended.then((how) => ['err', { type: 'throw', message: how }]);
  const ran = (async () => {
    try {
      await root.evaluate();
    } catch (e) {
      return e === call.exitSignal ? ended : ['err', errorBody('load_error', e)];
    }
    const handler = pickHandler(root.namespace);
    if (handler === null) return ['err', NO_HANDLER];
    if (req.mode === 'check') return ['ok', 'null'];
    try {
      const value = await handler(call.fromJson(JSON.stringify(req.payload ?? null)));
      let json;
      try { json = JSON.stringify(value); } catch (e) { json = e; }
      if (typeof json === 'string') return ['ok', json];
      const what = json !== undefined ? json.message
        : value === undefined ? 'undefined (return null for "no value")' : `a ${typeof value}`;
      return ['err', { type: 'not_json', message: clip(`the handler returned a value that is not JSON-serializable: ${what}`) }];
    } catch (e) {
      return e === call.exitSignal ? ended : ['err', errorBody('throw', e)];
    }
  })();
  const neverSettled = drained.then(() => ['err', {
    type: 'throw', message: "the handler's promise never settled (nothing was left running that could settle it)",
  }]);
  const result = await Promise.race([ran, ended, neverSettled]);
  if (call.exited === null && !call.crashed) await iiiGlobal.close(2000);
  frame.send(...result);
  call.finish();
  return { code: call.crashed ? 1 : 0, clean: call.clean() && shapes.same() };
}

// The export names of a linked module's namespace (its bindings are not
// read: they are not initialized before it runs), if a handler is among
// them.
function pickNames(ns) {
  const names = Reflect.ownKeys(ns);
  return names.includes('handler') || names.includes('default') ? names : null;
}

// One call's context, process, timers and modules.
class RealmCall {
  constructor(env) {
    this.env = envObject(guestEnvOf(env));
    this.timers = new Map(); // each timer the call set → its clear
    this.events = new EventEmitter();
    this.exited = null;
    this.crashed = false;
    this.tainted = false;
    this.exitSignal = Symbol('process.exit');
    this.ended = new Promise((resolve) => { this.end = resolve; });
    this.sources = [];
    this.modules = new Map();
    this.cwd = process.cwd();
    const out = fdStream(2); // a handler's stdout is the exec's stderr
    this.global = this.makeGlobal(out);
    this.context = vm.createContext(this.global, { name: 'sandbox-code-runner call' });
    this.fromJson = vm.runInContext('(text) => JSON.parse(text)', this.context);
  }

  makeGlobal(out) {
    const g = {};
    for (const name of NODE_NAMES) {
      const d = Object.getOwnPropertyDescriptor(globalThis, name);
      Object.defineProperty(g, name, {
        configurable: true,
        enumerable: d.enumerable,
        // Read through (node loads some lazily, fetch among them), taken
        // into the shapes before the call holds it; a write is the call's.
        get: () => { const v = globalThis[name]; shapes.add(v); return v; },
        set(v) { Object.defineProperty(g, name, { value: v, writable: true, configurable: true, enumerable: d.enumerable }); },
      });
    }
    const call = this;
    const timer = (set, clear, once) => (fn, ...args) => {
      if (typeof fn !== 'function') return set(fn, ...args);
      const t = set((...a) => { if (once) call.timers.delete(t); return fn(...a); }, ...args);
      call.timers.set(t, clear);
      return t;
    };
    Object.assign(g, {
      console: new Console({ stdout: out, stderr: out }),
      process: this.makeProcess(out),
      setTimeout: timer(setTimeout, clearTimeout, true),
      setInterval: timer(setInterval, clearInterval, false),
      setImmediate: timer(setImmediate, clearImmediate, true),
      clearTimeout: (t) => { call.timers.delete(t); clearTimeout(t); },
      clearInterval: (t) => { call.timers.delete(t); clearInterval(t); },
      clearImmediate: (t) => { call.timers.delete(t); clearImmediate(t); },
    });
    g.global = g;
    return g;
  }

  // The call's `process`: its own env, argv, exit code, listeners, stdio
  // and exit; other reads go to the server's.
  makeProcess(out) {
    const call = this;
    const stdin = Readable.from([]);
    const own = {
      env: this.env,
      argv: [process.execPath],
      execArgv: [],
      exitCode: undefined,
      stdout: out,
      stderr: out,
      stdin,
      exit(code) {
        call.exit(code ?? own.exitCode ?? 0);
        throw call.exitSignal;
      },
      reallyExit(code) { own.exit(code); },
      abort() { own.exit(134); },
    };
    for (const m of ['on', 'once', 'off', 'addListener', 'removeListener', 'removeAllListeners', 'emit',
      'listeners', 'rawListeners', 'listenerCount', 'prependListener', 'prependOnceListener', 'eventNames',
      'setMaxListeners', 'getMaxListeners']) {
      own[m] = (...a) => {
        const r = this.events[m](...a);
        return r === this.events ? proxy : r;
      };
    }
    const bound = new Map();
    const proxy = new Proxy(own, {
      get(t, p) {
        if (Object.hasOwn(t, p)) return t[p];
        const v = process[p];
        if (typeof v !== 'function') {
          if (v !== null && typeof v === 'object') shapes.add(v);
          return v;
        }
        if (!bound.has(p)) {
          const reads = PROCESS_READS.has(p);
          const f = function (...a) {
            if (!reads) call.tainted = true;
            return v.apply(process, a);
          };
          if (p === 'hrtime') f.bigint = process.hrtime.bigint;
          bound.set(p, f);
        }
        return bound.get(p);
      },
      has: (t, p) => Object.hasOwn(t, p) || p in process,
      ownKeys: (t) => [...new Set([...Reflect.ownKeys(t), ...Reflect.ownKeys(process)])],
      getOwnPropertyDescriptor(t, p) {
        if (Object.hasOwn(t, p)) return Reflect.getOwnPropertyDescriptor(t, p);
        const d = Reflect.getOwnPropertyDescriptor(process, p);
        return d && { value: proxy[p], writable: true, enumerable: d.enumerable, configurable: true };
      },
    });
    return proxy;
  }

  // The call asked to end (process.exit): it ends as it would in a
  // process of its own, with its `exit` listeners run.
  exit(code) {
    if (this.exited !== null) return;
    this.exited = code;
    this.end(`the handler called process.exit(${code}) before returning a value`);
  }

  // An error no code of the call caught (node's report on its stderr).
  crash(e) {
    this.crashed = true;
    writeAll(2, `${uncaught(e, 0)}\n`);
    this.end("the handler's promise never settled (nothing was left running that could settle it)");
  }

  // What the call left is let go: its timers cleared, its `exit`
  // listeners run (as a process's would).
  finish() {
    for (const [t, clear] of this.timers) clear(t);
    this.timers.clear();
    try { this.events.emit('exit', this.exited ?? 0); } catch { this.tainted = true; }
    this.events.removeAllListeners();
  }

  // Whether the server is as the call found it.
  clean() {
    return !this.tainted && !this.crashed && this.exited === null && process.cwd() === this.cwd;
  }

  // The module graph from `file` (with `suffix` appended to its text),
  // compiled and linked in this context, not yet run.
  async graph(file, source, suffix) {
    const root = this.module(pathToFileURL(file).href, source + suffix);
    await root.link((specifier, referrer) => this.resolve(specifier, referrer.identifier));
    return root;
  }

  module(url, text) {
    let m = this.modules.get(url);
    if (m) return m;
    if (LOADER_ONLY.test(text)) throw new NotHere(url);
    this.sources.push(text);
    const filename = fileURLToPath(url);
    m = new vm.SourceTextModule(text, {
      identifier: url,
      context: this.context,
      initializeImportMeta(meta) {
        meta.url = url;
        meta.filename = filename;
        meta.dirname = path.dirname(filename);
        meta.resolve = (s) => new URL(s, url).href;
      },
    });
    this.modules.set(url, m);
    return m;
  }

  resolve(specifier, referrer) {
    const name = specifier.startsWith('node:') ? specifier.slice(5) : specifier;
    if (builtinModules.includes(name) || (specifier.startsWith('node:') && isBuiltin(specifier))) {
      return this.builtin(`node:${name}`);
    }
    if (!/^(\.{0,2}\/|file:)/.test(specifier)) throw new NotHere(specifier); // a package
    const url = new URL(specifier, referrer);
    if (url.protocol !== 'file:' || !url.pathname.endsWith('.mjs')) throw new NotHere(url.href);
    let text;
    try { text = fs.readFileSync(fileURLToPath(url), 'utf8'); } catch { throw new NotHere(url.href); }
    return this.module(url.href, text);
  }

  builtin(id) {
    let m = this.modules.get(id);
    if (m) return m;
    const exports = requireBuiltin(id);
    shapes.add(exports, 1);
    const names = Object.keys(exports).filter((k) => k !== 'default');
    m = new vm.SyntheticModule(['default', ...names], function setAll() {
      this.setExport('default', exports);
      for (const k of names) this.setExport(k, exports[k]);
    }, { identifier: id, context: this.context });
    this.modules.set(id, m);
    return m;
  }
}

// `env` (the exec's) over the server's, as a fresh process's wrapper sets
// it (guestEnv), with values kept as strings as process.env keeps them.
function guestEnvOf(env) {
  const e = { ...process.env, ...env };
  guestEnv(e);
  return e;
}

function envObject(values) {
  const target = Object.create(null);
  Object.assign(target, values);
  return new Proxy(target, {
    set(t, k, v) { t[k] = String(v); return true; },
    defineProperty(t, k, d) { t[k] = String(d.value); return true; },
  });
}
