// The live `iii` global against an engine: SCR_TEST_III_URL=ws://127.0.0.1:PORT
// node --test guest/tests/   (skipped without it). Node uses the bundle
// build.rs made; python uses SCR_TEST_PY_SDK_DIR, or installs iii-sdk once
// into target/guest-pip with guest/python/install_sdk.py (needs PyPI).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  REPO, WRAPPERS, newSecret, parseFrame, plantNodeSdk, runAsync, runSync, tempDir,
} from './helpers.mjs';

const URL = process.env.SCR_TEST_III_URL;
const nodeSdk = URL ? plantNodeSdk() : null;

function pySdk() {
  if (!URL) return null;
  if (process.env.SCR_TEST_PY_SDK_DIR) return process.env.SCR_TEST_PY_SDK_DIR;
  const dir = path.join(REPO, 'target/guest-pip');
  if (!fs.existsSync(path.join(dir, '.scr-installed'))) {
    const r = runSync('python', WRAPPERS.pyInstall, '', { env: { SCR_PY_SDK_DIR: dir }, timeout: 180_000 });
    if (r.code !== 0) return null;
  }
  // The wrapper reads it as the guest user it drops to, who may not reach
  // into the checkout (a clone under a 0700 home): a copy in a temp dir.
  const copy = path.join(tempDir('scr-guest-py-'), 'iii-py');
  fs.cpSync(dir, copy, { recursive: true });
  return copy;
}
const pyDir = pySdk();

const skipNode = !URL ? 'SCR_TEST_III_URL not set' : !nodeSdk ? 'no iii-sdk bundle (cargo build first)' : false;
const skipPy = !URL ? 'SCR_TEST_III_URL not set' : !pyDir ? 'iii-sdk for python could not be installed' : false;

const nodeEnv = (name = 'sandbox-code-runner:run') => ({ III_URL: URL, SCR_NODE_SDK_DIR: nodeSdk, SCR_WORKER_NAME: name });
const pyEnv = (name = 'sandbox-code-runner:run') => ({ III_URL: URL, SCR_PY_SDK_DIR: pyDir, SCR_WORKER_NAME: name });

async function invokeAsync(lang, source, payload, env) {
  const d = tempDir();
  const file = path.join(d, lang === 'node' ? 'fn.mjs' : 'fn.py');
  fs.writeFileSync(file, source);
  const secret = newSecret();
  const r = await runAsync(lang, lang === 'node' ? WRAPPERS.nodeInvoke : WRAPPERS.pyInvoke,
    JSON.stringify({ secret, mode: 'call', module: file, payload }), { cwd: d, env });
  return { ...r, frame: parseFrame(r.stdout, secret) };
}

const NODE_LIST = [
  'const r = await iii.trigger({ function_id: "engine::functions::list", payload: {} });',
  'console.log(Array.isArray(r.functions));',
].join('\n');

test('node run: iii.trigger reaches the engine; no SDK chatter on stdout', { skip: skipNode }, async () => {
  const r = await runAsync('node', WRAPPERS.nodeRun, NODE_LIST, { env: nodeEnv() });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'true\n');
  assert.doesNotMatch(r.stderr, /\[iii\]|\[OTel\]/);
});

test('node run: concurrent guests each register, and trigger through the engine', { skip: skipNode }, async () => {
  const code = (i) => [
    `iii.registerFunction("guesttest::echo${i}", async (p) => ({ echoed: p.x }));`,
    // The engine holds registrations until the worker names itself: retry
    // while the function is not routable yet, with a deadline.
    'const until = Date.now() + 10000;',
    'let out;',
    'for (;;) {',
    `  try { out = await iii.trigger({ function_id: "guesttest::echo${i}", payload: { x: ${i} } }); break; }`,
    '  catch (e) { if (e.code !== "function_not_found" || Date.now() > until) throw e; }',
    '}',
    'console.log(JSON.stringify(out));',
  ].join('\n');
  const rs = await Promise.all([1, 2, 3].map((i) => runAsync('node', WRAPPERS.nodeRun, code(i), { env: nodeEnv() })));
  rs.forEach((r, k) => {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `{"echoed":${k + 1}}\n`);
  });
});

test('node run: explicit iii.shutdown() and exit codes are kept', { skip: skipNode }, async () => {
  const a = await runAsync('node', WRAPPERS.nodeRun, `${NODE_LIST}\nawait iii.shutdown();`, { env: nodeEnv() });
  assert.equal(a.code, 0, a.stderr);
  const b = await runAsync('node', WRAPPERS.nodeRun, `${NODE_LIST}\nprocess.exitCode = 7;`, { env: nodeEnv() });
  assert.equal(b.code, 7, b.stderr);
  const c = await runAsync('node', WRAPPERS.nodeRun, `${NODE_LIST}\nthrow new Error("after iii");`, { env: nodeEnv() });
  assert.equal(c.code, 1);
  assert.match(c.stderr, /after iii/);
});

test('node handler: iii.trigger inside a handler', { skip: skipNode }, async () => {
  const src = 'export async function handler(p) { const r = await iii.trigger({ function_id: "engine::functions::list", payload: {} }); console.log("log"); return { ok: Array.isArray(r.functions), p }; }';
  const r = await invokeAsync('node', src, 5, nodeEnv('sandbox-code-runner:guesttest::fn'));
  assert.deepEqual(r.frame, { kind: 'ok', value: { ok: true, p: 5 } }, r.stderr);
});

const PY_LIST = 'r = iii.trigger({"function_id": "engine::functions::list", "payload": {}})\nprint(isinstance(r["functions"], list))\n';

test('python run: iii.trigger reaches the engine; concurrent guests both work', { skip: skipPy }, async () => {
  const rs = await Promise.all([1, 2].map(() => runAsync('python', WRAPPERS.pyRun, PY_LIST, { env: pyEnv() })));
  for (const r of rs) {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'True\n');
  }
});

test('python run: exit codes survive the client shutdown', { skip: skipPy }, async () => {
  const a = await runAsync('python', WRAPPERS.pyRun, `${PY_LIST}import sys\nsys.exit(6)\n`, { env: pyEnv() });
  assert.equal(a.code, 6, a.stderr);
  const b = await runAsync('python', WRAPPERS.pyRun, `${PY_LIST}raise ValueError("after iii")\n`, { env: pyEnv() });
  assert.equal(b.code, 1);
  assert.match(b.stderr, /ValueError: after iii/);
});

test('python handler: iii.trigger inside a handler', { skip: skipPy }, async () => {
  const src = 'def handler(p):\n    r = iii.trigger({"function_id": "engine::functions::list", "payload": {}})\n    print("log")\n    return {"ok": isinstance(r["functions"], list), "p": p}\n';
  const r = await invokeAsync('python', src, 5, pyEnv('sandbox-code-runner:guesttest::fn'));
  assert.deepEqual(r.frame, { kind: 'ok', value: { ok: true, p: 5 } }, r.stderr);
});
