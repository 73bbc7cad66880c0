// sandbox-code-runner: a session's node interpreter (see turn.sh).
// argv: node --input-type=module -e <shared.mjs + run.mjs's definitions +
// this file> <dir>, started as the guest user, cwd /tmp, fds 3 and 4 the
// session's `in` and `life` FIFOs (read-write), stdout /dev/null, stderr
// <dir>/boot.err.
// Each run is one turn of this one process, as run.mjs runs code: a module,
// or an async function body whose `return` is `result`. What persists is
// the process: `globalThis` (`globalThis.x = 1`, or a sloppy body's bare
// `x = 1`), the module cache, timers and connections; a turn's own
// declarations are its module's or its body's, as without a session. An
// uncaught throw prints its report and gives 1; so does one thrown later
// from what an earlier turn left running. process.exit() ends the
// interpreter: the next run starts a fresh one on the same files. The run's
// env (its guest token among it) is the process's for that turn only, and
// `iii` is a fresh lazy client each turn (closed at its end).

import { Writable } from 'node:stream';

// (guest/node/serving.mjs is put in front of this file by the worker: fdStream,
// reopen, takeCall, writeStatus, nextRelay.)

async function session() {
  const out = fdStream(1);
  const err = fdStream(2);
  Object.defineProperty(process, 'stdout', { configurable: true, enumerable: true, get: () => out });
  Object.defineProperty(process, 'stderr', { configurable: true, enumerable: true, get: () => err });
  asGuest(1000, 1000); // already the guest: HOME, caches and PATH
  dropEvalGlobals(builtinModules);
  const dir = process.argv[process.argv.length - 1];
  process.argv.length = 1;
  const baseEnv = { ...process.env };
  delete baseEnv.SCR_TURN;
  // `life` again, close-on-exec: what a turn starts must not hold it. The
  // new one first: with no writer at all, a relay reading it would see
  // its end.
  const life = fs.openSync(path.join(dir, 'life'), fs.constants.O_RDWR);
  fs.closeSync(4);
  reopen(2, '/dev/null'); // boot is over: nothing goes to boot.err from here on

  let turn = null;
  // What an earlier turn left running may throw later: it is reported on
  // whatever stderr is current, and the session goes on.
  process.on('uncaughtException', (e) => {
    process.stderr.write(`Uncaught ${report(e)}\n`);
    if (turn) turn.failed = true;
  });
  // process.exit() in guest code ends the interpreter: the turn's exit
  // code is written before it goes (its end lets `life` go).
  process.on('exit', (code) => {
    if (turn) writeStatus(turn.status, code ?? 0);
  });

  for (;;) {
    const relay = await nextRelay();
    turn = { failed: false, status: null };
    await runTurn(dir, relay, baseEnv, turn);
    turn = null;
    try { fs.writeSync(life, `done ${relay}\n`); } catch { /* the relay is gone */ }
  }
}

// An error as node reports one, without this harness's own frames.
function report(e) {
  const text = e instanceof Error && typeof e.stack === 'string' ? e.stack : inspect(e);
  return text.split('\n').filter((l) => !/^\s+at .*\[eval\d*\]/.test(l)).join('\n');
}

async function runTurn(dir, relay, baseEnv, turn) {
  const taken = takeCall(dir, relay);
  if (taken === null) return; // nothing ran and no status says so: the relay says `lost`
  const { req, data } = taken;
  turn.status = taken.status;
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, baseEnv, req.env || {});
  const secret = process.env.SCR_RESULT_SECRET;
  const maxResult = Number(process.env.SCR_RESULT_MAX || 0);
  delete process.env.SCR_RESULT_SECRET;
  delete process.env.SCR_RESULT_MAX;
  process.exitCode = undefined;
  const frame = secret ? frameWriter(secret, '\n') : null;
  const { failure, iiiGlobal } = await runCode(data.toString('utf8'), frame, maxResult);
  if (failure) process.stderr.write(`Uncaught ${report(failure.e)}\n`);
  await iiiGlobal.close(2000);
  const code = failure || turn.failed ? 1 : (process.exitCode ?? 0);
  process.exitCode = undefined;
  writeStatus(turn.status, code);
  fs.closeSync(turn.status);
  turn.status = null;
  reopen(1, '/dev/null');
  reopen(2, '/dev/null');
}

await session();
