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

// (the shared prelude, guest/node/shared.mjs, is prepended to this file by the worker)

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

// The whole run: a pre-started interpreter loads this file's definitions
// ahead and calls it (its last line, `await main();`, is the cold start's).
async function main() {
  asGuest(1000, 1000); // the node image's node user
  dropEvalGlobals(builtinModules);
  const code = await readStdin();
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
  // Rethrown to the top level so Node prints its usual uncaught-error report and exits 1.
  if (failure) throw failure.e;
}

await main();
