// sandbox-code-runner: node HANDLER wrapper (one call of a registered
// function, or registration-time validation).
// argv: node --input-type=module -e <this file>   (cwd /tmp)
// stdin: {"secret":"<32 hex>","mode":"call"|"check","module":"/tmp/.scr/fn/<name>.mjs","payload":<any>}
// env: III_URL, SCR_WORKER_NAME.
// stdout carries exactly one line, written last:
//   \x1eSCR1 <secret> ok <json>\n   or   \x1eSCR1 <secret> err {"type","message","stack"?}\n
// Everything the handler prints goes to stderr. The handler never sees the
// secret, so whatever it prints cannot pass for the result frame.
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

// Imports a sibling copy of `file` with `suffix` appended (so relative
// imports still resolve), then removes the copy; where the guest may not
// write next to it (the worker's handler directory), a copy in its home.
async function importVariant(file, source, ext, suffix, load) {
  const name = `.${path.basename(file)}.${randomBytes(4).toString('hex')}${ext}`;
  let copy = path.join(path.dirname(file), name);
  try {
    fs.writeFileSync(copy, source + suffix, { mode: 0o600 });
  } catch {
    copy = path.join(process.env.HOME, name);
    fs.writeFileSync(copy, source + suffix, { mode: 0o600 });
  }
  try { return await load(copy); } finally { fs.rmSync(copy, { force: true }); }
}

async function loadHandler(file, source) {
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } catch (e) {
    // Lenient: a CommonJS handler (module.exports / exports.handler) fails as
    // an ES module with a ReferenceError; load it as CommonJS instead.
    if (!(e instanceof ReferenceError && /\b(module|exports|require) is not defined\b/.test(e.message))) {
      return { error: errorBody('load_error', e) };
    }
    try {
      mod = await importVariant(file, source, '.cjs', '', (p) => createRequire(p)(p));
    } catch (e2) {
      return { error: errorBody('load_error', e2) };
    }
  }
  let handler = pickHandler(mod);
  // Lenient: a top-level `function handler` / `const handler =` that was
  // never exported. Re-import a copy that exports it (top-level code runs again).
  if (!handler && UNEXPORTED_HANDLER.test(source)) {
    try {
      handler = pickHandler(await importVariant(file, source, '.mjs', '\nexport { handler };\n', (p) => import(pathToFileURL(p).href)));
    } catch { /* fall through to no_handler */ }
  }
  if (!handler) {
    return { error: NO_HANDLER };
  }
  return { handler };
}

async function main() {
  asGuest(1000, 1000); // the node image's node user
  dropEvalGlobals(builtinModules);
  let req;
  try {
    req = JSON.parse(await readStdin());
  } catch (e) {
    process.stderr.write(`sandbox-code-runner invoke wrapper: stdin is not the expected JSON request: ${e.message}\n`);
    process.exit(2);
  }
  if (typeof req?.secret !== 'string' || !/^[0-9a-f]{32}$/.test(req.secret) || typeof req.module !== 'string') {
    process.stderr.write('sandbox-code-runner invoke wrapper: request lacks a valid secret or module\n');
    process.exit(2);
  }
  const frame = frameWriter(req.secret);
  const { mode, module: file, payload } = req;
  req = undefined;

  // Everything but the frame goes to stderr: swapping the process.stdout
  // getter also moves console.*, and fd 1 is never opened as a stream (which
  // would make it non-blocking under our writeSync).
  Object.defineProperty(process, 'stdout', { configurable: true, enumerable: true, get: () => process.stderr });

  // A handler that calls process.exit, or whose promise can never settle,
  // still answers with a frame, and the wrapper still exits 0.
  let exitCalled = null;
  const realExit = process.exit;
  process.exit = function exit(code) {
    if (exitCalled === null) exitCalled = code ?? process.exitCode ?? 0;
    return realExit.call(process, code);
  };
  process.on('exit', () => {
    if (!frame.sent) {
      frame.send('err', {
        type: 'throw',
        message: exitCalled !== null
          ? `the handler called process.exit(${exitCalled}) before returning a value`
          : "the handler's promise never settled (nothing was left running that could settle it)",
      });
    }
    process.exitCode = 0;
  });

  let source = '';
  try { source = fs.readFileSync(file, 'utf8'); } catch (e) {
    frame.send('err', errorBody('load_error', e));
    process.exit(0);
  }
  const iiiGlobal = installIii(source, 'sandbox-code-runner:fn');
  await iiiGlobal.ready;

  let result;
  const loaded = await loadHandler(file, source);
  if (loaded.error) {
    result = ['err', loaded.error];
  } else if (mode === 'check') {
    result = ['ok', 'null'];
  } else {
    try {
      const handler = loaded.handler; // called bare: `this` is not the wrapper's object
      const value = await handler(payload);
      let json;
      try { json = JSON.stringify(value); } catch (e) {
        json = e;
      }
      if (typeof json === 'string') {
        result = ['ok', json];
      } else {
        const what = json instanceof Error ? json.message
          : value === undefined ? 'undefined (return null for "no value")' : `a ${typeof value}`;
        result = ['err', { type: 'not_json', message: clip(`the handler returned a value that is not JSON-serializable: ${what}`) }];
      }
    } catch (e) {
      result = ['err', errorBody('throw', e)];
    }
  }
  await iiiGlobal.close(2000);
  frame.send(...result);
  process.exit(0);
}

await main();
