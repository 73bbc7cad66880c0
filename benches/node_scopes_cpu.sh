#!/bin/bash
# CPU of a VM's processes per node call, node's two pre-started paths
# (issue 43): pre-started processes (guest/prestart/relay.sh + ready.mjs)
# against scope servers (scope.sh + scope.mjs). Run as root on a host with
# node and cgroup v1's cpuacct: the relays and everything they start run as
# a VM runs them (the /tmp/.scr of this host), all in one cgroup, whose
# usage after N back-to-back calls (and the refills they cause, waited
# for) over N is the figure. No worker, engine or daemon: guest side only.
#   benches/node_scopes_cpu.sh [N] [run|handler]
# (node is the one on PATH: PATH=<node 24>/bin:$PATH measures another.)
set -eu
N=${1:-40}
kind=${2:-handler}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/scr-cpu.XXXXXX)
CG=/sys/fs/cgroup/cpuacct/scr-node-cpu
mkdir -p "$CG"
echo $$ >"$CG/tasks"
cd "$work"
node - "$repo" "$kind" <<'JS'
const fs = require('fs');
const [repo, kind] = process.argv.slice(2);
const g = `${repo}/guest/node/`;
const shared = fs.readFileSync(g + 'shared.mjs', 'utf8');
const W = [shared + fs.readFileSync(g + 'run.mjs', 'utf8'), shared + fs.readFileSync(g + 'invoke.mjs', 'utf8')];
const pre = `const WRAPPERS = ${JSON.stringify(W)};\n`;
fs.writeFileSync('scopes.mjs', pre + fs.readFileSync(`${repo}/guest/node/serving.mjs`, 'utf8') + fs.readFileSync(`${repo}/guest/prestart/scope.mjs`, 'utf8'));
fs.writeFileSync('processes.mjs', pre + fs.readFileSync(`${repo}/guest/prestart/ready.mjs`, 'utf8'));
fs.writeFileSync('/tmp/scr-cpu-handler.mjs', 'export async function handler(p) { return p; }\n');
const body = kind === 'run' ? 'console.log(1)'
  : JSON.stringify({ secret: '0123456789abcdef0123456789abcdef', mode: 'call', module: '/tmp/scr-cpu-handler.mjs', payload: { n: 1 } });
const env = kind === 'run' ? { SCR_RESULT_SECRET: '0123456789abcdef0123456789abcdef', SCR_RESULT_MAX: '1000' } : {};
fs.writeFileSync('request', JSON.stringify({ script: W[kind === 'run' ? 0 : 1], env, stdin: Buffer.byteLength(body) }) + '\n' + body);
JS
chmod 644 /tmp/scr-cpu-handler.mjs
clean() {
  pkill -KILL -f '/tmp/.scr/(scope/scope|pre/ready).mjs' 2>/dev/null || true
  rm -rf /tmp/.scr /tmp/.scr-scope-* && mkdir -m 755 /tmp/.scr
}
usage() { cat "$CG/cpuacct.usage"; }
settle() { sleep 3; }   # the refills a call leaves run after its verdict
measure() {
  clean
  local mode=$1 S F i=1
  F=$(cat "$repo/guest/prestart/relay_fork.sh")
  if [ "$mode" = scopes ]; then
    S="$F
$(cat "$repo/guest/as_guest.sh" "$repo/guest/prestart/scope.sh")"
    sh -c "$S
SCR_HARNESS=\$1
scr_scope_fill 2 1000:1000" sh "$(cat scopes.mjs)"
    call() { SCR_VERDICT_KEY=k sh -c "$S
scr_scope 2 5000" <request 2>&1 | cat >/dev/null; }
  else
    S=$(cat "$repo/guest/prestart/relay.sh")
    sh -c "$S
SCR_HARNESS=\$1
scr_fill /tmp/.scr/pre/1 2 node /tmp/.scr/pre/ready.mjs" sh "$(cat processes.mjs)"
    call() { i=$((i + 1)); SCR_VERDICT_KEY=k sh -c "$S
$F
SCR_NEXT='scr_fill /tmp/.scr/pre/$i 2 node /tmp/.scr/pre/ready.mjs'; scr_relay /tmp/.scr/pre/$((i - 1)) 5.000" <request 2>&1 | cat >/dev/null; }
  fi
  settle; call; call; settle
  local u0 t0 u1 t1
  u0=$(usage); t0=$(date +%s%N)
  for _ in $(seq "$N"); do call; done
  t1=$(date +%s%N); settle; u1=$(usage)
  echo "$mode $kind: CPU per call $(((u1 - u0) / N / 1000)) us, wall per call $(((t1 - t0) / N / 1000)) us"
}
measure processes
measure scopes
measure processes
measure scopes
clean
rm -rf "$work"
