# sandbox-code-runner: the pre-started interpreter's shell side, sourced by
# every exec that starts or uses one (`sh -c <this file + one command>`).
#
# A pre-started interpreter waits in its own session (setsid), with its
# generation directory /tmp/.scr/pre/<n>/ holding four FIFOs it keeps open
# read-write (so opening them never blocks while it lives): `in` (fd 3, the
# relay's pid), `out` (fd 1), `err` (fd 2) and `life` (fd 4, never written:
# its end is the end of the call); plus `pid`. It has loaded its wrapper
# harness and the iii SDK module, connected nothing, and holds no token. A
# call hands it the relay's pid (node, scr_relay here), or the relay's pid
# and budget (python's fork server, relay_fork.sh); the interpreter reads
# the request (a JSON header line and the exec's stdin bytes) from the
# relay's /proc/<pid>/fd/6. A node interpreter writes `ready` once warm,
# `taken` once it has read the request and `status` (its exit code) when it
# is done.

SCR_PRE=/tmp/.scr/pre

# The worker's command sets SCR_HARNESS (the interpreter's harness script)
# and, for a relay whose interpreter is to be replaced, SCR_NEXT (`scr_spawn
# <dir> <interpreter argv…>` or `scr_fill …`).

# scr_spawn <dir> <interpreter argv…>: python's fork server: starts one in
# <dir>, after killing every other one (it runs only when no call is using
# one: at a relay's verdict, or before a cold exec), so a VM holds the
# server and one child (waiting, or serving a call) and nothing else. (A
# python call's child is in its own process group and is not touched.)
scr_spawn() {
  n=$1
  shift
  for p in "$SCR_PRE"/*/pid; do
    [ -e "$p" ] || continue
    q=${p%/pid}
    read -r q_pid <"$p" 2>/dev/null && kill -KILL -"$q_pid" 2>/dev/null
    rm -rf "$q"
  done
  scr_start "$n" "$@"
}

# scr_fill <base> <interpreter argv…>: node's: a node interpreter serves one
# call, and starting one takes longer than a call, so two wait: a call
# takes one, and the next call, even straight after it, finds the other
# ready while a new one warms (started here, at the verdict: never more
# than two exist). Keeps two live ones, removes the rest, and starts <base>.0
# and <base>.1 as needed. A directory without a pid is one still starting.
# (Ones started before the SDK was planted serve a call each, as a cold
# start would: the wrapper loads the SDK itself.)
scr_fill() {
  n=$1
  shift
  live=0
  for q in "$SCR_PRE"/*; do
    [ -d "$q" ] || continue
    p=
    read -r p <"$q/pid" 2>/dev/null || { [ -e "$q/pid" ] || { live=$((live + 1)); continue; }; }
    if [ "$live" -lt 2 ] && [ -n "$p" ] && [ -e "/proc/$p/fd/3" ]; then
      live=$((live + 1))
      continue
    fi
    [ -n "$p" ] && kill -KILL -"$p" 2>/dev/null
    rm -rf "$q"
  done
  # Node starts from this file (a relay does not carry the harness): the
  # exec that does writes it, whole or not at all.
  if [ -n "${SCR_HARNESS:-}" ]; then
    mkdir -p "$SCR_PRE" && printf '%s' "$SCR_HARNESS" >"$SCR_PRE/ready.mjs.$$" &&
      mv -f "$SCR_PRE/ready.mjs.$$" "$SCR_PRE/ready.mjs"
  fi
  k=0
  while [ "$live" -lt 2 ]; do
    scr_start "$n.$k" "$@"
    live=$((live + 1))
    k=$((k + 1))
  done
}

# scr_start <dir> <interpreter argv…>: one waiting interpreter in <dir>, in
# its own session, holding <dir>'s FIFOs read-write (so opening them never
# blocks while it lives).
scr_start() {
  n=$1
  shift
  mkdir -p "$n" 2>/dev/null && mkfifo "$n/in" "$n/out" "$n/err" "$n/life" 2>/dev/null || return 0
  # Nothing of the exec that starts it: an fd it kept open (a relay's
  # 5-8 hold this exec's streams) would keep the exec from ending.
  (cd /tmp && exec setsid "$@" "$n" </dev/null 3<>"$n/in" 1<>"$n/out" 2<>"$n/err" 4<>"$n/life" \
    5>&- 6>&- 7>&- 8>&- 9>&-) &
  echo $! >"$n/pid"
}

# scr_pick <generation dir>: $d and $pid are the node interpreter to use: one
# that finished warming (it wrote <dir>/ready; the worker's latest generation
# first), else one still warming; a live one holds fd 3, `in`, until it has a
# request (a dead one, a zombie too, holds nothing). If there is none, the
# call ends here, cold.
scr_pick() {
  d=
  pid=
  w=
  wp=
  for q in "$1".* "$SCR_PRE"/*; do
    p=
    read -r p <"$q/pid" 2>/dev/null || continue
    [ -n "$p" ] && [ -e "/proc/$p/fd/3" ] || continue
    if [ -e "$q/ready" ]; then
      d=$q
      pid=$p
      return 0
    fi
    [ -z "$w" ] && w=$q && wp=$p
  done
  [ -n "$w" ] || scr_verdict "" cold 0
  d=$w
  pid=$wp
}

# scr_relay <generation dir> <seconds>: hands a waiting node interpreter
# (scr_pick) this shell's pid (it reads this exec's stdin itself, through
# /proc/<this shell>/fd/6) and passes its stdout, stderr and exit code through. The last line of stderr
# is always the relay's verdict, written after everything the interpreter
# wrote: `\036SCR-RELAY cold` (none was there or it never took the request:
# nothing ran, take the cold path), `… timeout` (the deadline passed and its
# whole process group was killed), or `… exit <code>`.
scr_relay() {
  scr_pick "$1"
  SCR_USED=$pid
  exec 4<"$d/out" 5<"$d/err" 6<&0
  # Both copiers start before the hand-over, so neither is still starting
  # when the call's output comes.
  cat <&5 >&2 &
  e=$!
  timeout "$2" cat <&4 &
  o=$!
  exec 4<&- 5<&-
  echo $$ >"$d/in"
  wait "$o"
  rc=$?
  if [ "$rc" = 124 ]; then
    kill -KILL -"$pid" 2>/dev/null
    wait "$e"
    scr_verdict "$d" timeout 124
  fi
  wait "$e"
  scr_ended "$d" "$d/taken" "$d/status"
}

# scr_ended <paths to remove> <taken file> <status file>: the verdict of a
# call whose interpreter is done: cold if it never took the request, else
# its exit code (137 when it died without writing one).
scr_ended() {
  [ -e "$2" ] || scr_verdict "$1" cold 0
  st=
  read -r st <"$3" 2>/dev/null
  st=${st:-137}
  scr_verdict "$1" "exit $st" "$st"
}

# The verdict. The clean-up and the next interpreter ($SCR_NEXT, when the
# VM serves later calls) go to a background shell that holds none of the
# exec's streams, so neither is on this call's path: the exec is over when
# the relay exits, and the next interpreter warms while the answer travels.
# scr_verdict <paths to remove> <verdict> <exit code>
scr_verdict() {
  (
    exec </dev/null >/dev/null 2>&1
    # The call is over: what is left of the interpreter it used goes, and
    # the next one starts.
    [ -n "${SCR_USED:-}" ] && kill -KILL -"$SCR_USED"
    rm -rf $1
    [ -n "${SCR_NEXT:-}" ] && eval "$SCR_NEXT"
  ) &
  printf '\036SCR-RELAY %s\n' "$2" >&2
  exit "$3"
}
