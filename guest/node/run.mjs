// sandbox-code-runner: node RUN wrapper.
// argv: node --input-type=module -e <this file>   (cwd /tmp)
// stdin: the user's code, verbatim.  env: III_URL, SCR_WORKER_NAME,
// SCR_RESULT_SECRET (read and removed before the code runs).
// The user's code runs as an ES module from a real file so that top-level
// await works and bare imports resolve through /tmp/node_modules and
// /node_modules like `node main.mjs` would. Code that is an async function
// body (it parses as one: no static import/export, and a top-level `return`
// is allowed) runs as that body inside the same module file, and what it
// returns is the run's `result`; other code runs as the module it is.
// The code is parsed once to tell, never run twice. Its stdout/stderr and
// exit code are its own; an uncaught throw prints Node's usual report and
// exits 1. On a normal end the last stdout line is the result frame
// (`\n\x1eSCR1 <secret> result <json>`), which the worker takes off.
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { builtinModules, createRequire } from 'node:module';
import { inspect } from 'node:util';
import { pathToFileURL } from 'node:url';

// (the shared prelude, guest/node/shared.mjs, is prepended to this file by the worker)

const AsyncFunction = (async () => {}).constructor;

// Whether `code` is an async function body (parsing only: the Function
// constructor compiles, it does not run).
function isFunctionBody(code) {
  try {
    new AsyncFunction(code);
    return true;
  } catch {
    return false;
  }
}

// The result frame's JSON: the value, null when JSON cannot represent it;
// past `max` bytes only its size and shape (the worker writes the marker).
function resultJson(value, max) {
  let json;
  try {
    json = JSON.stringify(value);
  } catch {
    json = undefined;
  }
  if (json === undefined) return ['result', 'null'];
  if (max > 0 && Buffer.byteLength(json) > max) {
    const shape = Array.isArray(value) ? { array: value.length }
      : typeof value === 'string' ? { string: value.length }
        : value && typeof value === 'object' ? { object: Object.keys(value).length } : {};
    return ['result_omitted', JSON.stringify({ bytes: Buffer.byteLength(json), ...shape })];
  }
  return ['result', json];
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

// One run of `code`: as a module file next to the cwd, or as the async
// function body it parses as. Returns the failure (an uncaught throw, for
// the caller to report) and the `iii` global it installed; on a normal end
// the result frame is written. A session (guest/session/session.mjs) runs
// each of its runs through this, in the one process it keeps.
async function runCode(code, frame, maxResult) {
  const body = isFunctionBody(code);
  const iiiGlobal = installIii(code, 'sandbox-code-runner:run');

  // Next to the cwd so that relative imports and import.meta behave as for a
  // file the user wrote there; hidden, private, and removed afterwards.
  let dir = process.cwd();
  try { fs.accessSync(dir, fs.constants.W_OK); } catch { dir = process.env.HOME; fs.mkdirSync(dir, { recursive: true, mode: 0o700 }); }
  // Runs on one runtime are serialized, so a leftover from a killed run (older
  // than a minute) is safe to sweep.
  for (const f of fs.readdirSync(dir)) {
    if (!/^\.scr-run-[0-9a-f]+\.mjs$/.test(f)) continue;
    try { if (Date.now() - fs.statSync(path.join(dir, f)).mtimeMs > 60_000) fs.unlinkSync(path.join(dir, f)); } catch { /* raced */ }
  }
  const file = path.join(dir, `.scr-run-${randomBytes(6).toString('hex')}.mjs`);
  // A body keeps its line numbers: the opening goes on its first line.
  const text = body ? `export default await (async () => {${code}\n})();\n` : code;
  fs.writeFileSync(file, text, { mode: 0o600, flag: 'wx' });
  const removeFile = () => { try { fs.unlinkSync(file); } catch { /* already gone */ } };
  process.on('exit', removeFile); // process.exit() in user code skips the finally below

  await iiiGlobal.ready;
  let failure = null;
  let returned;
  try {
    const mod = await import(pathToFileURL(file).href);
    if (body) returned = mod.default;
  } catch (e) {
    failure = { e };
  } finally {
    removeFile();
    process.off('exit', removeFile);
  }
  if (frame && !failure) frame.send(...resultJson(returned, maxResult));
  return { failure, iiiGlobal };
}

// The whole run: a pre-started interpreter loads this file's definitions
// ahead and calls it (its last line, `await main();`, is the cold start's).
async function main() {
  asGuest(1000, 1000); // the node image's node user
  const secret = process.env.SCR_RESULT_SECRET;
  const maxResult = Number(process.env.SCR_RESULT_MAX || 0);
  delete process.env.SCR_RESULT_SECRET;
  delete process.env.SCR_RESULT_MAX;
  const frame = secret ? frameWriter(secret, '\n') : null;
  dropEvalGlobals(builtinModules);
  const code = await readStdin();
  const { failure, iiiGlobal } = await runCode(code, frame, maxResult);
  if (!(await iiiGlobal.close(2000))) process.exit(failure ? 1 : (process.exitCode ?? 0));
  // Rethrown to the top level so Node prints its usual uncaught-error report and exits 1.
  if (failure) throw failure.e;
}

await main();
