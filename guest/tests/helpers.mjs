// Shared by the node:test suites: run the guest wrappers with the host's node
// and python3 exactly as the worker does (script inline, code/request on stdin).
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const GUEST = path.resolve(import.meta.dirname, '..');
export const REPO = path.resolve(GUEST, '..');
const read = (rel) => fs.readFileSync(path.join(GUEST, rel), 'utf8');
// Composed as the worker composes them (src/guest.rs): prelude + wrapper.
export const WRAPPERS = {
  nodeRun: read('node/shared.mjs') + read('node/run.mjs'),
  nodeInvoke: read('node/shared.mjs') + read('node/invoke.mjs'),
  pyRun: read('python/shared.py') + read('python/run.py'),
  pyInvoke: read('python/shared.py') + read('python/invoke.py'),
  pyInstall: read('python/install_sdk.py'),
};
// Run as root (as in a VM), the wrappers drop to the guest user (uid
// 1000) before the guest's code runs, as they do there: the test dirs are
// then open to it, and python is one whose stdlib it can read (a pyenv
// under /root is not).
export const ROOT = process.geteuid() === 0;
export const PYTHON = process.env.SCR_TEST_PYTHON
  || (ROOT && fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');

const made = [];
process.on('exit', () => { for (const d of made) fs.rmSync(d, { recursive: true, force: true }); });

export function tempDir(prefix = 'scr-guest-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(d);
  if (ROOT) fs.chmodSync(d, 0o777);
  return d;
}

// The wrappers' own directory (the VM's /tmp/.scr): root's, as a root
// wrapper insists.
const WORKER_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'scr-guest-own-'));
made.push(WORKER_DIR);
fs.chmodSync(WORKER_DIR, 0o755);

function argv(lang, script) {
  return lang === 'node'
    ? [process.execPath, ['--input-type=module', '-e', script]]
    : [PYTHON, ['-Ic', script]];
}

// Env of a guest: nothing inherited but PATH/HOME, the SDK locations
// pointing at test dirs (or nowhere), a guest home of its own (the
// wrapper's HOME), plus `env`.
export function guestEnv(env) {
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME || '/tmp',
    SCR_NODE_SDK_DIR: '/nonexistent/iii-sdk',
    SCR_PY_SDK_DIR: '/nonexistent/iii-py',
    SCR_GUEST_HOME: path.join(tempDir('scr-guest-home-'), 'home'),
    SCR_WORKER_DIR: WORKER_DIR,
    ...env,
  };
}

export function runSync(lang, script, stdin, { cwd, env = {}, timeout = 30_000 } = {}) {
  const [cmd, args] = argv(lang, script);
  const r = spawnSync(cmd, args, { input: stdin, cwd: cwd ?? tempDir(), env: guestEnv(env), timeout, encoding: 'utf8' });
  return { code: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

export function runAsync(lang, script, stdin, { cwd, env = {}, timeout = 30_000 } = {}) {
  const [cmd, args] = argv(lang, script);
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: cwd ?? tempDir(), env: guestEnv(env) });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeout);
    child.on('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
    child.stdin.end(stdin);
  });
}

export const newSecret = () => randomBytes(16).toString('hex');

// What the worker does with an invoke wrapper's stdout: the frame is the one
// line that starts with the marker and THIS call's secret; anything else is
// noise. Returns {kind, value} or null.
export function parseFrame(stdout, secret) {
  const prefix = `\x1eSCR1 ${secret} `;
  const lines = stdout.split('\n').filter((l) => l.startsWith(prefix));
  if (lines.length !== 1) return null;
  const rest = lines[0].slice(prefix.length);
  const sp = rest.indexOf(' ');
  const kind = rest.slice(0, sp);
  if (kind !== 'ok' && kind !== 'err') return null;
  return { kind, value: JSON.parse(rest.slice(sp + 1)) };
}

// Plants a handler module and calls it through the invoke wrapper.
export function invokeSync(lang, source, { payload = null, mode = 'call', env, dir } = {}) {
  const d = dir ?? tempDir();
  const file = path.join(d, `fn-${randomBytes(3).toString('hex')}.${lang === 'node' ? 'mjs' : 'py'}`);
  fs.writeFileSync(file, source);
  const secret = newSecret();
  const stdin = JSON.stringify({ secret, mode, module: file, payload });
  const r = runSync(lang, lang === 'node' ? WRAPPERS.nodeInvoke : WRAPPERS.pyInvoke, stdin, { cwd: d, env });
  return { ...r, secret, frame: parseFrame(r.stdout, secret) };
}

// The bundle build.rs made (newest under target/guest-npm), planted the way
// the worker plants it: <dir>/dist/index.mjs. null when not built.
export function plantNodeSdk() {
  let bundle = process.env.SCR_TEST_NODE_BUNDLE;
  if (!bundle) {
    const root = path.join(REPO, 'target/guest-npm');
    const found = fs.existsSync(root)
      ? fs.readdirSync(root).map((k) => path.join(root, k, 'iii-sdk.mjs')).filter((p) => fs.existsSync(p))
      : [];
    found.sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
    bundle = found[0];
  }
  if (!bundle) return null;
  const dir = path.join(tempDir('scr-guest-sdk-'), 'node_modules/iii-sdk');
  fs.mkdirSync(path.join(dir, 'dist'), { recursive: true });
  fs.copyFileSync(bundle, path.join(dir, 'dist/index.mjs'));
  return dir;
}
