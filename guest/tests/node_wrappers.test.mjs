// node --test guest/tests/   — the node wrappers, run as the worker runs them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import {
  GUEST, ROOT, WRAPPERS, invokeSync, newSecret, parseFrame, plantNodeSdk, runAsync, runSync, tempDir,
} from './helpers.mjs';

const run = (code, opts) => runSync('node', WRAPPERS.nodeRun, code, opts);
const invoke = (source, opts) => invokeSync('node', source, opts);

test('the prelude is defined once: no wrapper carries its own copy', () => {
  for (const [file, fn] of [
    ['node/run.mjs', 'function installIii('], ['node/invoke.mjs', 'function installIii('],
    ['python/run.py', 'def _install_iii('], ['python/invoke.py', 'def _install_iii('],
  ]) {
    assert.ok(!fs.readFileSync(path.join(GUEST, file), 'utf8').includes(fn), `${file} defines ${fn}`);
  }
  assert.ok(WRAPPERS.nodeRun.includes('function installIii(') && WRAPPERS.nodeInvoke.includes('function installIii('));
  assert.ok(WRAPPERS.pyRun.includes('def _install_iii(') && WRAPPERS.pyInvoke.includes('def _install_iii('));
});

test('run: stdout/stderr pass through, top-level await works, exit 0', () => {
  const r = run('console.log("out"); console.error("err"); console.log(await Promise.resolve(42));');
  assert.equal(r.code, 0);
  assert.equal(r.stdout, 'out\n42\n');
  assert.equal(r.stderr, 'err\n');
});

test('run: exit codes', () => {
  assert.equal(run('process.exit(3)').code, 3);
  assert.equal(run('process.exitCode = 4').code, 4);
  assert.equal(run('await new Promise((r) => setTimeout(r, 20)); process.exit(0)').code, 0);
});

test('run: an uncaught throw prints Node\'s report with the source line and exits 1', () => {
  const r = run('console.log("before");\nfunction f() { throw new Error("boom"); }\nf();\n');
  assert.equal(r.code, 1);
  assert.equal(r.stdout, 'before\n');
  assert.match(r.stderr, /function f\(\) \{ throw new Error\("boom"\); \}/);
  assert.match(r.stderr, /Error: boom\n\s+at f \(file:\/\/.*:2:/);
});

test('run: syntax error exits 1', () => {
  const r = run('let x = ;');
  assert.equal(r.code, 1);
  assert.match(r.stderr, /SyntaxError/);
});

test('run: bare and relative imports resolve from the cwd; the code file is removed', () => {
  const cwd = tempDir();
  fs.mkdirSync(path.join(cwd, 'node_modules/fakepkg'), { recursive: true });
  fs.writeFileSync(path.join(cwd, 'node_modules/fakepkg/package.json'), '{"name":"fakepkg","type":"module","exports":"./i.js"}');
  fs.writeFileSync(path.join(cwd, 'node_modules/fakepkg/i.js'), 'export const v = "pkg";');
  fs.writeFileSync(path.join(cwd, 'lib.mjs'), 'export const w = "rel";');
  const r = run('import { v } from "fakepkg"; import { w } from "./lib.mjs"; console.log(v, w);', { cwd });
  assert.equal(r.stdout, 'pkg rel\n');
  assert.deepEqual(fs.readdirSync(cwd).filter((f) => f.startsWith('.scr-run-')), []);
  run('process.exit(2)', { cwd });
  assert.deepEqual(fs.readdirSync(cwd).filter((f) => f.startsWith('.scr-run-')), []);
});

test('run: `node -e` builtin-module globals are not visible, like a plain node file', () => {
  const r = run('console.log(typeof fs, typeof path, typeof module, typeof crypto.getRandomValues, typeof process.pid)');
  assert.equal(r.stdout, 'undefined undefined undefined function number\n');
});

test('run: iii introspection explains itself; use without the SDK gives a clear error', () => {
  const r = run([
    'console.log(String(iii).split("\\n")[0]);',
    'console.log(Object.keys(iii).join(","));',
    'console.log(typeof iii.then, JSON.stringify({ iii }).length > 10);',
    'try { await iii.trigger({ function_id: "x", payload: {} }) } catch (e) { console.log(e.message) }',
  ].join('\n'));
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  assert.match(lines[0], /^iii: the iii-sdk client/);
  assert.equal(lines[1], 'trigger,registerFunction,registerTrigger,registerTriggerType,unregisterTriggerType,shutdown');
  assert.equal(lines[2], 'undefined true');
  assert.match(lines[3], /^iii-sdk is not available in this runtime/);
});

test('run: introspection never connects; first real use does, with a unique name', async (t) => {
  const sdk = plantNodeSdk();
  if (!sdk) return t.skip('no iii-sdk bundle: run cargo build first (build.rs makes it)');
  // A TCP listener that only counts connection attempts.
  let connections = 0;
  const server = net.createServer((s) => { connections += 1; s.destroy(); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const env = { III_URL: `ws://127.0.0.1:${server.address().port}`, SCR_NODE_SDK_DIR: sdk };
  try {
    const quiet = await runAsync('node', WRAPPERS.nodeRun,
      'console.log(iii); console.log(Object.keys(iii)); `${iii}`; await iii; iii.shutdown();', { env });
    assert.equal(quiet.code, 0, quiet.stderr);
    assert.match(quiet.stdout, /^iii: the iii-sdk client/);
    assert.equal(connections, 0);
    assert.ok(fs.existsSync(path.join(sdk, 'package.json')), 'the wrapper supplies the SDK its package.json');

    const used = await runAsync('node', WRAPPERS.nodeRun, [
      // Not awaited: the wrapper waits for a pending trigger before shutdown.
      'iii.trigger({ function_id: "x", payload: {}, timeoutMs: 300 }).catch(() => {});',
      'console.log("done");',
    ].join('\n'), { env });
    assert.equal(used.code, 0, used.stderr);
    assert.equal(used.stdout, 'done\n', 'no SDK chatter on stdout');
    assert.ok(connections >= 1);
  } finally {
    server.close();
  }
});

test('invoke: ok frame; prints go to stderr; stdout holds only the frame', () => {
  const r = invoke('export function handler(p) { console.log("log", p.n); process.stdout.write("raw\\n"); return { doubled: p.n * 2 }; }', { payload: { n: 21 } });
  assert.equal(r.code, 0);
  assert.deepEqual(r.frame, { kind: 'ok', value: { doubled: 42 } });
  assert.equal(r.stdout, `\x1eSCR1 ${r.secret} ok {"doubled":42}\n`);
  assert.equal(r.stderr, 'log 21\nraw\n');
});

test('invoke: handler shapes (async, default function, default object, unexported, CommonJS)', () => {
  const cases = [
    ['export const handler = async (p) => { await new Promise((r) => setTimeout(r, 5)); return [p, "ü"]; }', [1, 'ü']],
    ['export default function (p) { return p + 1; }', 2],
    ['export default { k: 10, handler(p) { return p + this.k; } }', 11],
    ['function handler(p) { return { u: p }; }', { u: 1 }],
    ['const handler = async (p) => p * 3;', 3],
    ['exports.handler = (p) => ({ cjs: p });', { cjs: 1 }],
    ['module.exports = { handler: async (p) => ({ cjs: p }) };', { cjs: 1 }],
    ['export function handler() { return this === undefined; }', true],
  ];
  for (const [source, expected] of cases) {
    const r = invoke(source, { payload: 1 });
    assert.deepEqual(r.frame, { kind: 'ok', value: expected }, `${source}\n${r.stderr}`);
  }
});

test('invoke: throw', () => {
  const r = invoke('export function handler() { throw new TypeError("bad input"); }');
  assert.equal(r.frame.kind, 'err');
  assert.equal(r.frame.value.type, 'throw');
  assert.equal(r.frame.value.message, 'TypeError: bad input');
  assert.match(r.frame.value.stack, /at handler \(file:/);
  assert.doesNotMatch(r.frame.value.stack, /\[eval/);
  const s = invoke('export async function handler() { throw "plain string"; }');
  assert.deepEqual(s.frame.value, { type: 'throw', message: "non-Error value thrown: 'plain string'" });
});

test('invoke: non-JSON results are not_json', () => {
  for (const ret of ['undefined', '1n', '(() => { const a = {}; a.a = a; return a; })()', '() => 1', 'Symbol("s")']) {
    const r = invoke(`export function handler() { return ${ret}; }`);
    assert.equal(r.frame?.kind, 'err', ret);
    assert.equal(r.frame.value.type, 'not_json', ret);
  }
  assert.deepEqual(invoke('export function handler() { return null; }').frame, { kind: 'ok', value: null });
});

test('invoke: no_handler and load_error', () => {
  assert.equal(invoke('export const x = 1;').frame.value.type, 'no_handler');
  assert.equal(invoke('export const handler = 5;').frame.value.type, 'no_handler');
  const syntax = invoke('export function handler( {');
  assert.equal(syntax.frame.value.type, 'load_error');
  assert.match(syntax.frame.value.message, /^SyntaxError/);
  const thrown = invoke('throw new Error("at import");');
  assert.equal(thrown.frame.value.type, 'load_error');
  assert.equal(thrown.frame.value.message, 'Error: at import');
});

test('invoke: check mode loads and verifies without calling', () => {
  assert.deepEqual(invoke('export function handler() { throw new Error("called"); }', { mode: 'check' }).frame, { kind: 'ok', value: null });
  assert.equal(invoke('export const nope = 1;', { mode: 'check' }).frame.value.type, 'no_handler');
});

test('invoke: a frame printed by the handler is not accepted', () => {
  const forged = 'export function handler() { console.log("\\x1eSCR1 " + "0".repeat(32) + " ok 666"); process.stdout.write("\\x1eSCR1 x ok 1\\n"); return 2; }';
  const r = invoke(forged);
  assert.deepEqual(r.frame, { kind: 'ok', value: 2 });
  assert.equal(parseFrame(r.stdout, '0'.repeat(32)), null);
  // The forged line never reaches stdout (the real secret, random hex, may
  // well contain "666").
  assert.doesNotMatch(r.stdout, / ok 666/);
});

test('invoke: process.exit and a never-settling promise still answer, exit 0', () => {
  const a = invoke('export function handler() { process.exit(5); }');
  assert.equal(a.code, 0);
  assert.equal(a.frame.value.type, 'throw');
  assert.match(a.frame.value.message, /process\.exit\(5\)/);
  const b = invoke('export function handler() { return new Promise(() => {}); }');
  assert.equal(b.code, 0);
  assert.match(b.frame.value.message, /never settled/);
});

test('invoke: leftover timers do not keep the process alive', () => {
  const t0 = Date.now();
  const r = invoke('export function handler() { setInterval(() => {}, 1000); return "x"; }');
  assert.deepEqual(r.frame, { kind: 'ok', value: 'x' });
  assert.ok(Date.now() - t0 < 5000);
});

test('invoke: malformed stdin exits 2 without a frame', () => {
  const r = runSync('node', WRAPPERS.nodeInvoke, 'not json');
  assert.equal(r.code, 2);
  assert.equal(r.stdout, '');
  const s = runSync('node', WRAPPERS.nodeInvoke, JSON.stringify({ secret: 'short', module: '/x.mjs' }));
  assert.equal(s.code, 2);
});

test('invoke: the handler cannot read the secret from globals', () => {
  const secret = newSecret();
  const d = tempDir();
  const file = path.join(d, 'h.mjs');
  fs.writeFileSync(file, 'export function handler() { return JSON.stringify(Object.getOwnPropertyNames(globalThis).map((k) => { try { return String(globalThis[k]); } catch { return ""; } })) + JSON.stringify(process.env) + process.argv.join(" "); }');
  const r = runSync('node', WRAPPERS.nodeInvoke, JSON.stringify({ secret, mode: 'call', module: file, payload: null }), { cwd: d });
  const f = parseFrame(r.stdout, secret);
  assert.equal(f.kind, 'ok');
  assert.ok(!f.value.includes(secret));
});

test('the wrappers fit in one argv string', () => {
  for (const f of ['node/run.mjs', 'node/invoke.mjs', 'python/run.py', 'python/invoke.py', 'python/install_sdk.py']) {
    assert.ok(fs.statSync(path.join(GUEST, f)).size < 128 * 1024, f); // Linux MAX_ARG_STRLEN
  }
});

// The wrappers' first act (shared.mjs's asGuest): as root, drop for good to
// the image's user; HOME, caches and npm's global prefix are the guest's
// own; no guest code runs when that cannot be done.
const IDS = "import fs from 'node:fs'; const s = fs.readFileSync('/proc/self/status', 'utf8');"
  + " console.log(['Uid', 'Gid', 'Groups'].map((k) => s.match(new RegExp(`^${k}:(.*)$`, 'm'))[1].trim().split(/\\s+/).join(' ')).join('|'));";
const expectedIds = () => {
  if (ROOT) return '1000 1000 1000 1000|1000 1000 1000 1000|';
  const s = fs.readFileSync('/proc/self/status', 'utf8');
  return ['Uid', 'Gid', 'Groups'].map((k) => s.match(new RegExp(`^${k}:(.*)$`, 'm'))[1].trim().split(/\s+/).join(' ')).join('|');
};

test('guest user: run and handler code run as the image\'s user, for good', () => {
  const r = run(IDS);
  assert.equal(r.stdout, `${expectedIds()}\n`, r.stderr);
  const [imp, body] = IDS.split('; const ');
  const h = invoke(`${imp};\nexport function handler() { const ${body.replace('console.log(', 'return (')} }`);
  assert.deepEqual(h.frame, { kind: 'ok', value: expectedIds() }, h.stderr);
  if (ROOT) {
    const back = run('try { process.setuid(0); console.log("root again"); } catch { console.log("stays"); }');
    assert.equal(back.stdout, 'stays\n');
  }
});

test('guest user: HOME, caches, npm\'s prefix and PATH are the guest\'s own', () => {
  const home = path.join(tempDir(), 'home');
  const r = run([
    "import fs from 'node:fs'; import os from 'node:os';",
    'const e = process.env;',
    'console.log(e.HOME, e.XDG_CACHE_HOME, e.NPM_CONFIG_PREFIX, os.homedir() === e.HOME);',
    "console.log(e.PATH.split(':').slice(-2).join(' '));",
    'const st = fs.statSync(e.HOME); console.log((st.mode & 0o777).toString(8), st.uid === process.getuid());',
  ].join('\n'), { env: { SCR_GUEST_HOME: home } });
  assert.deepEqual(r.stdout.split('\n'), [
    `${home} ${home}/.cache ${home}/.npm-global true`,
    `${home}/.local/bin ${home}/.npm-global/bin`,
    '700 true',
    '',
  ], r.stderr);
});

test('guest user: no guest code runs as root or without its user', () => {
  for (const spec of ['0:0', '1000:0', 'node', '1000']) {
    const r = run('console.log("ran")', { env: { SCR_GUEST_USER: spec } });
    assert.equal(r.code, 1, spec);
    assert.equal(r.stdout, '', spec);
    assert.match(r.stderr, /not running guest code as root/);
  }
});

test('guest user: a worker dir a guest could change stops the run', { skip: !ROOT && 'only a root wrapper drops, and checks the worker\'s directory' }, () => {
  const base = tempDir();
  const theirs = path.join(base, 'theirs');
  fs.mkdirSync(theirs);
  fs.chownSync(theirs, 1000, 1000);
  const link = path.join(base, 'link');
  fs.symlinkSync(tempDir(), link);
  for (const d of [theirs, link]) {
    const r = run('console.log("ran")', { env: { SCR_WORKER_DIR: d } });
    assert.equal(r.code, 1, d);
    assert.equal(r.stdout, '', d);
    assert.match(r.stderr, /is not a directory only root may change/);
  }
});

test('guest user: npm installs, locally and globally, and it imports at once and later', () => {
  const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' });
  if (npm.status !== 0) return;
  const cwd = tempDir();
  // The package is the guest's own (npm links a directory and makes its
  // bin executable).
  const pkg = path.join(cwd, 'src');
  const env = { SCR_GUEST_HOME: path.join(tempDir(), 'home') };
  const flags = "'--offline', '--no-audit', '--no-fund', '--no-update-notifier'";
  const r = run([
    "import fs from 'node:fs';",
    "import { execFileSync } from 'node:child_process';",
    "import { createRequire } from 'node:module';",
    `fs.mkdirSync(${JSON.stringify(pkg)});`,
    `fs.writeFileSync(${JSON.stringify(`${pkg}/package.json`)}, JSON.stringify({ name: 'scrpkg', version: '1.0.0', main: 'index.js', bin: { scrpkg: 'cli.js' } }));`,
    `fs.writeFileSync(${JSON.stringify(`${pkg}/index.js`)}, 'module.exports = { value: 42 };');`,
    `fs.writeFileSync(${JSON.stringify(`${pkg}/cli.js`)}, '#!/usr/bin/env node\\nconsole.log("cli", process.getuid());', { mode: 0o755 });`,
    `execFileSync('npm', ['install', ${flags}, ${JSON.stringify(pkg)}], { stdio: ['ignore', 'ignore', 'inherit'] });`,
    `execFileSync('npm', ['install', '-g', ${flags}, ${JSON.stringify(pkg)}], { stdio: ['ignore', 'ignore', 'inherit'] });`,
    "const { default: { value } } = await import('scrpkg');",
    "console.log(value, createRequire(process.cwd() + '/x.js')('scrpkg').value);",
    "process.stdout.write(execFileSync('scrpkg', { encoding: 'utf8' }));",
  ].join('\n'), { cwd, env, timeout: 120_000 });
  const uid = ROOT ? 1000 : process.getuid();
  assert.equal(r.stdout, `42 42\ncli ${uid}\n`, r.stderr);
  const again = run("import pkg from 'scrpkg'; import { execFileSync } from 'node:child_process'; console.log(pkg.value); process.stdout.write(execFileSync('scrpkg', { encoding: 'utf8' }));", { cwd, env });
  assert.equal(again.stdout, `42\ncli ${uid}\n`, again.stderr);
});
