// Protocol checks driven by the npm `iii-sdk` (0.22.x) as a real client.
//
//   node protocol.mjs ws://127.0.0.1:PORT
//
// Runs every check against the engine at argv[2], prints one line per check,
// and exits non-zero on the first failure with a clear message.
// conformance/tests/sdk_clients.rs runs it against the stand-in engine (and a
// real one when III_BIN is set), with the SDK installed in
// <target>/sdk-cache/node: it passes that directory as III_SDK_NODE_DIR. Run
// by hand, the SDK is resolved from this file's directory instead (an
// `npm ci` here).
//
// The SDK prints `[iii] …` lines of its own on stdout; the checks' lines
// start with `ok` or `FAIL`.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { pathToFileURL } from 'node:url';

const url = process.argv[2];
if (!url) {
  console.error('usage: node protocol.mjs ws://HOST:PORT');
  process.exit(2);
}

// ---- the SDK, resolved as an ESM consumer gets it ----

async function loadSdk() {
  const base = process.env.III_SDK_NODE_DIR
    ? path.join(process.env.III_SDK_NODE_DIR, 'package.json')
    : import.meta.url;
  const require = createRequire(base);
  // Walk up from the resolved entry to the package root, then take the
  // `import` export, so the checks run the ESM build like an ESM app would.
  let dir = path.dirname(require.resolve('iii-sdk'));
  for (;;) {
    const candidate = path.join(dir, 'package.json');
    try {
      const pkg = JSON.parse(readFileSync(candidate, 'utf8'));
      if (pkg.name === 'iii-sdk') {
        const entry = path.join(dir, pkg.exports['.'].import);
        return { version: pkg.version, sdk: await import(pathToFileURL(entry).href) };
      }
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error('cannot find the iii-sdk package root');
    dir = up;
  }
}

// ---- reporting ----

class CheckFailure extends Error {}

let current = '(setup)';
let count = 0;

function fail(message) {
  throw new CheckFailure(message);
}

function assert(cond, message) {
  if (!cond) fail(message);
}

function assertEqual(actual, expected, what) {
  if (!isDeepStrictEqual(actual, expected)) {
    fail(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  }
}

async function check(name, body) {
  current = name;
  await body();
  count += 1;
  console.log(`ok ${count} - ${name}`);
}

function describe(err) {
  if (err && typeof err === 'object' && 'code' in err) {
    return `${err.name ?? 'Error'}{code=${JSON.stringify(err.code)}, message=${JSON.stringify(err.message)}}`;
  }
  return String(err?.stack ?? err);
}

// ---- helpers ----

/** Rejects with a clear message if `promise` does not settle within `ms`. */
function within(ms, what, promise) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailure(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** The rejection of `promise`; fails the check if it resolves instead. */
async function rejection(promise, what) {
  try {
    const value = await promise;
    fail(`${what}: expected an error, got the result ${JSON.stringify(value)}`);
  } catch (err) {
    if (err instanceof CheckFailure) throw err;
    return err;
  }
}

/**
 * Polls `probe` until it returns true or `ms` pass. Waits on an observable
 * condition (a registration reaching the engine), never on a fixed delay.
 */
async function waitFor(ms, what, probe) {
  const until = Date.now() + ms;
  for (;;) {
    if (await probe()) return;
    if (Date.now() >= until) fail(`${what}: still not true after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const CALL_MS = 5000;

function call(client, function_id, payload) {
  return client.trigger({ function_id, payload, timeoutMs: CALL_MS });
}

/** Waits until `engine::functions::info` knows `function_id`. */
async function waitVisible(client, function_id) {
  await waitFor(10000, `${function_id} becomes visible`, async () => {
    try {
      await call(client, 'engine::functions::info', { function_id });
      return true;
    } catch (err) {
      if (err?.code === 'NOT_FOUND') return false;
      throw err;
    }
  });
}

// ---- the checks ----

const ECHO_REQUEST = { type: 'object', properties: { msg: { type: 'string' } } };
const ECHO_RESPONSE = { type: 'object', properties: { echo: {} } };
const WORKER = 'node-proto-worker';

async function main() {
  const { version, sdk } = await loadSdk();
  const { registerWorker, InvocationError } = sdk;
  console.log(`# npm iii-sdk ${version} against ${url}`);
  if (!version.startsWith('0.22.')) fail(`expected npm iii-sdk 0.22.x, found ${version}`);

  // OTel is off: it is process-global in this SDK (one client's shutdown
  // tears it down for all), and it plays no part in these checks.
  const connect = (workerName) =>
    registerWorker(url, {
      workerName,
      otel: { enabled: false },
      enableMetricsReporting: false,
    });

  const worker = connect(WORKER);
  const caller = connect('node-proto-caller');
  // The caller's raw frames, for the wire-level check below (the SDK's
  // socket is not a typed field, but it is the one the SDK reads).
  const callerFrames = [];
  caller.ws?.on('message', (raw) => callerFrames.push(raw.toString()));

  await check('register then trigger: payload echoed, _caller_worker_id injected', async () => {
    worker.registerFunction('demo::echo', async (input) => ({ echo: input }), {
      description: 'Echo the payload back',
      request_format: ECHO_REQUEST,
      response_format: ECHO_RESPONSE,
    });
    await waitVisible(caller, 'demo::echo');
    const out = await call(caller, 'demo::echo', { msg: 'hello' });
    assertEqual(out?.echo?.msg, 'hello', 'echoed msg');
    const injected = out.echo._caller_worker_id;
    assert(
      typeof injected === 'string' && injected.length > 0,
      `the engine injects _caller_worker_id into object payloads: got ${JSON.stringify(out)}`,
    );
    // The SDK keeps the id from `workerregistered` (not a typed field).
    if (typeof caller.workerId === 'string') {
      assertEqual(injected, caller.workerId, "_caller_worker_id is the caller's worker_id");
    }
    assertEqual(Object.keys(out.echo).sort(), ['_caller_worker_id', 'msg'], 'echoed keys');
    const arr = await call(caller, 'demo::echo', [1, 2, 3]);
    assertEqual(arr, { echo: [1, 2, 3] }, 'a non-object payload passes untouched');
  });

  await check('a relayed invocationresult carries the engine\'s field order', async () => {
    // The engine decodes the callee's result and writes its own frame:
    // type, invocation_id, function_id, then result or error, whatever
    // order the callee's SDK wrote (recorded in fixtures/transcripts).
    const relayed = callerFrames
      .map((raw) => ({ raw, frame: JSON.parse(raw) }))
      .filter(({ frame }) => frame.type === 'invocationresult' && frame.function_id === 'demo::echo');
    assert(relayed.length > 0, 'the caller socket saw the demo::echo results');
    for (const { raw, frame } of relayed) {
      assertEqual(Object.keys(frame), ['type', 'invocation_id', 'function_id', 'result'], `field order of ${raw}`);
    }
  });

  await check('a handler error arrives with its code', async () => {
    worker.registerFunction('demo::fail', async () => {
      throw new Error('demo failure');
    });
    await waitVisible(caller, 'demo::fail');
    const err = await rejection(call(caller, 'demo::fail', { x: 1 }), 'demo::fail');
    assert(err instanceof InvocationError, `expected an InvocationError, got ${describe(err)}`);
    // The Node SDK reports a thrown handler error as `invocation_failed`
    // with the error's message and stack; the engine passes it through.
    assertEqual(err.code, 'invocation_failed', 'error code');
    assertEqual(err.message, 'invocation_failed: demo failure', 'error message');
    assertEqual(err.function_id, 'demo::fail', 'error function_id');
    assert(
      typeof err.stacktrace === 'string' && err.stacktrace.includes('demo failure'),
      `the handler's stacktrace passes through: got ${JSON.stringify(err.stacktrace)}`,
    );
  });

  await check('function_not_found', async () => {
    const err = await rejection(call(caller, 'demo::missing', {}), 'demo::missing');
    assert(err instanceof InvocationError, `expected an InvocationError, got ${describe(err)}`);
    assertEqual(err.code, 'function_not_found', 'error code');
    assertEqual(
      err.message,
      'function_not_found: Function demo::missing not found in namespace default.',
      'error message',
    );
  });

  await check('engine::functions::info returns the registered schemas', async () => {
    const info = await call(caller, 'engine::functions::info', { function_id: 'demo::echo' });
    assertEqual(info?.function_id, 'demo::echo', 'function_id');
    assertEqual(info?.worker_name, WORKER, 'worker_name');
    assertEqual(info?.description, 'Echo the payload back', 'description');
    assertEqual(info?.request_schema, ECHO_REQUEST, 'request_schema');
    assertEqual(info?.response_schema, ECHO_RESPONSE, 'response_schema');
    const err = await rejection(
      call(caller, 'engine::functions::info', { function_id: 'nope::x' }),
      'info of an unknown id',
    );
    assertEqual(err.code, 'NOT_FOUND', 'unknown id error code');
  });

  await check('a second live worker with a taken name is rejected', async () => {
    const twin = connect(WORKER);
    twin.registerFunction('twin::only', async () => ({ twin: true }));
    // This SDK ignores `registrationrejected` (0.22.1 has no handler for it):
    // what it exposes is the engine closing its socket and the SDK going back
    // to reconnecting. Watch the first socket's own frames to see why.
    const socket = twin.ws;
    assert(socket, 'the SDK opened a socket');
    const frames = [];
    socket.on('message', (raw) => {
      try {
        frames.push(JSON.parse(raw.toString()));
      } catch {
        frames.push({ undecodable: raw.toString() });
      }
    });
    const closed = new Promise((resolve) => socket.once('close', (code) => resolve(code)));
    try {
      await within(10000, 'the engine closes the twin', closed);
      const rejected = frames.find((f) => f.type === 'registrationrejected');
      assert(rejected, `a registrationrejected frame before the close: got ${JSON.stringify(frames)}`);
      assertEqual(rejected.code, 'WORKER_NAMESPACE_CONFLICT', 'rejection code');
      assertEqual(rejected.worker_name, WORKER, 'rejected worker_name');
      assertEqual(rejected.namespace, 'default', 'rejected namespace');
      assert(
        typeof rejected.owner_worker_id === 'string' && rejected.owner_worker_id.length > 0,
        `the rejection names the owner: ${JSON.stringify(rejected)}`,
      );
      assert(
        twin.connectionState === 'reconnecting',
        `the SDK loops on reconnect after the close: state ${JSON.stringify(twin.connectionState)}`,
      );
      // The first worker keeps serving; the twin's function never shows.
      const out = await call(caller, 'demo::echo', { msg: 'still here' });
      assertEqual(out?.echo?.msg, 'still here', 'the first worker still answers');
      const info = await call(caller, 'engine::functions::info', { function_id: 'demo::echo' });
      assertEqual(info?.worker_name, WORKER, 'demo::echo still belongs to the first worker');
      const gone = await rejection(call(caller, 'twin::only', {}), 'twin::only');
      assertEqual(gone.code, 'function_not_found', "the twin's function is not callable");
      const notFound = await rejection(
        call(caller, 'engine::functions::info', { function_id: 'twin::only' }),
        'info of twin::only',
      );
      assertEqual(notFound.code, 'NOT_FOUND', "the twin's function is not listed");
    } finally {
      await twin.shutdown();
    }
  });

  await check('a callee disconnect mid-call gives invocation_stopped', async () => {
    const hanger = connect('node-proto-hanger');
    let started;
    const handlerStarted = new Promise((resolve) => {
      started = resolve;
    });
    hanger.registerFunction('demo::hang', () => {
      started();
      return new Promise(() => {}); // never answers
    });
    await waitVisible(caller, 'demo::hang');
    const pending = caller.trigger({ function_id: 'demo::hang', payload: {}, timeoutMs: 15000 });
    pending.catch(() => {}); // observed below
    await within(10000, 'the demo::hang handler starts', handlerStarted);
    await hanger.shutdown();
    const err = await rejection(within(10000, 'the caller is answered', pending), 'demo::hang');
    assert(err instanceof InvocationError, `expected an InvocationError, got ${describe(err)}`);
    assertEqual(err.code, 'invocation_stopped', 'error code');
  });

  await check("a worker's functions vanish when its socket closes", async () => {
    await worker.shutdown();
    await waitFor(10000, 'demo::echo disappears', async () => {
      try {
        await call(caller, 'demo::echo', {});
        return false;
      } catch (err) {
        return err?.code === 'function_not_found';
      }
    });
  });

  await caller.shutdown();
  console.log(`# ${count} checks passed`);
}

try {
  await main();
  process.exit(0);
} catch (err) {
  const why = err instanceof CheckFailure ? err.message : `unexpected error: ${describe(err)}`;
  console.log(`FAIL - ${current}: ${why}`);
  process.exit(1);
}
