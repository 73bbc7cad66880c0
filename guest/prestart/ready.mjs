// sandbox-code-runner: a pre-started node interpreter (see relay.sh).
// argv: node --input-type=module -e <this file> <dir>   (cwd /tmp; fds 3/1/2
// are <dir>'s in/out/err FIFOs, opened read-write by the spawner; stdin is
// /dev/null). It imports the iii SDK bundle (when it is planted), connects
// nothing, then waits for one request on fd 3:
//   {"script": <a wrapper, as for node --input-type=module -e>, "env": {..}, "stdin": <n bytes>}\n<n bytes>
// and runs the script as that command would in a fresh process: its stdin
// is those bytes, its env the VM's plus the request's, process.argv [node].
// Its exit code goes to <dir>/status, read by the relay.
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';

const dir = process.argv[1];
const SDK_DIR = process.env.SCR_NODE_SDK_DIR || '/node_modules/iii-sdk';
const SDK_FILE = `${SDK_DIR}/dist/index.mjs`;
if (fs.existsSync(SDK_FILE)) {
  // The bundle reads ../package.json; the wrapper writes the same one.
  const pj = `${SDK_DIR}/package.json`;
  try {
    if (!fs.existsSync(pj)) {
      fs.writeFileSync(pj, JSON.stringify({
        name: 'iii-sdk', version: '0.22.1', type: 'module',
        main: './dist/index.mjs', exports: { '.': './dist/index.mjs' },
      }));
    }
    await import(pathToFileURL(SDK_FILE).href); // loaded, not connected
  } catch { /* the wrapper's `iii` explains on first use */ }
}

// One request: a header line, then exactly `stdin` bytes.
function readRequest() {
  const chunk = Buffer.alloc(1 << 16);
  let buf = Buffer.alloc(0);
  let nl = -1;
  while ((nl = buf.indexOf(10)) < 0) {
    const n = fs.readSync(3, chunk, 0, chunk.length, null);
    if (n === 0) process.reallyExit(97);
    buf = Buffer.concat([buf, chunk.subarray(0, n)]);
  }
  const req = JSON.parse(buf.subarray(0, nl).toString('utf8'));
  const want = Number(req.stdin);
  const parts = [buf.subarray(nl + 1)];
  let have = parts[0].length;
  const big = Buffer.alloc(1 << 20);
  while (have < want) {
    const n = fs.readSync(3, big, 0, Math.min(big.length, want - have), null);
    if (n === 0) break;
    parts.push(Buffer.from(big.subarray(0, n)));
    have += n;
  }
  return { req, data: Buffer.concat(parts).subarray(0, want) };
}

const { req, data } = readRequest();
fs.closeSync(3);
fs.writeFileSync(path.join(dir, 'taken'), '');
Object.assign(process.env, req.env || {});

const status = path.join(dir, 'status');
const report = (code) => { try { fs.writeFileSync(status, String((code ?? 0) & 0xff)); } catch { /* gone */ } };
process.on('exit', (code) => report(code));
const reallyExit = process.reallyExit;
process.reallyExit = function exit(code) { report(code); return reallyExit.call(process, code); };

const stdin = Readable.from([data]);
Object.defineProperty(process, 'stdin', { configurable: true, enumerable: true, get: () => stdin });
process.argv.length = 1;
const wrapper = path.join(dir, 'wrapper.mjs');
fs.writeFileSync(wrapper, req.script, { mode: 0o600 });
await import(pathToFileURL(wrapper).href);
