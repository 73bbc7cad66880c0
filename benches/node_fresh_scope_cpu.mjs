// CPU per fresh JS scope in this node (issue 43, docs/performance.md):
// a worker_threads Worker started and ended, N in a row, against the
// process's own CPU (process.cpuUsage counts every thread).
//   node benches/node_fresh_scope_cpu.mjs [N]
// (A process per scope: `node -e 0` in a loop under a cpuacct cgroup, as
// benches/node_scopes_cpu.sh measures its calls.)
import { Worker } from 'node:worker_threads';

const N = Number(process.argv[2]) || 40;

async function cpuPer(label, start) {
  const one = () => new Promise((ended) => start().once('exit', ended));
  await one();
  await one();
  const before = process.cpuUsage();
  for (let i = 0; i < N; i++) await one();
  const used = process.cpuUsage(before);
  console.log(`${label}: ${((used.user + used.system) / N / 1000).toFixed(1)} ms CPU per scope (node ${process.version})`);
}

await cpuPer('a Worker, empty script', () => new Worker('', { eval: true }));
await cpuPer('a Worker, empty ES module', () => new Worker(new URL('data:text/javascript,')));
