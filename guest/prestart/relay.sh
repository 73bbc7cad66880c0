# sandbox-code-runner: the pre-started interpreter's shell side, sourced by
# every exec that starts or uses one (`sh -c <this file + one command>`).
#
# A pre-started interpreter waits in its own session (setsid), with its
# generation directory /tmp/.scr/pre/<n>/ holding four FIFOs it keeps open
# read-write (so opening them never blocks while it lives): `in` (fd 3, the
# request), `out` (fd 1), `err` (fd 2) and `life` (fd 4, never written: its
# end is the end of the call); plus `pid`. It has loaded its wrapper harness
# and the iii SDK module, connected nothing, and holds no token. A call
# hands it one request: a JSON header line and the exec's stdin bytes (node,
# scr_relay here), or the relay's pid and budget (python's fork server,
# relay_fork.sh). A node interpreter writes `taken` once it has read the
# request and `status` (its exit code) when it exits.

SCR_PRE=/tmp/.scr/pre

# The worker's command sets SCR_HARNESS (the interpreter's harness script)
# and, for a relay whose interpreter is to be replaced, SCR_NEXT (`<dir>
# <interpreter argv…>`).

# scr_spawn <dir> <interpreter argv…>: starts one waiting interpreter in <dir>,
# after killing every other one but the one serving a call ($SCR_KEEP, when
# a node relay starts the next as it hands its call over), so a VM never
# holds more than two: the one serving a call (a node interpreter, or
# python's fork server with the child it forked) and the next. (A python
# call's child is in its own process group and is not touched.)
scr_spawn() {
  n=$1
  shift
  for p in "$SCR_PRE"/*/pid; do
    [ -e "$p" ] || continue
    q=${p%/pid}
    [ "$q" = "${SCR_KEEP:-}" ] && continue
    read -r q_pid <"$p" 2>/dev/null && kill -KILL -"$q_pid" 2>/dev/null
    rm -rf "$q"
  done
  mkdir -p "$n" 2>/dev/null && mkfifo "$n/in" "$n/out" "$n/err" "$n/life" 2>/dev/null || return 0
  # Nothing of the exec that starts it: an fd it kept open (a relay's
  # 5-8 hold this exec's streams) would keep the exec from ending.
  (cd /tmp && exec setsid "$@" "$n" </dev/null 3<>"$n/in" 1<>"$n/out" 2<>"$n/err" 4<>"$n/life" \
    5>&- 6>&- 7>&- 8>&- 9>&-) &
  echo $! >"$n/pid"
}

# scr_waiting <dir>: $pid is the interpreter waiting in <dir> (it holds fd
# 3, `in`, until it has a request; a dead one, a zombie too, holds nothing);
# if there is none, the call ends here, cold.
scr_waiting() {
  pid=
  read -r pid <"$1/pid" 2>/dev/null
  [ -n "$pid" ] && [ -e "/proc/$pid/fd/3" ] || scr_verdict "$1" cold 0
}

# scr_relay <dir> <seconds>: hands the interpreter in <dir> this shell's pid
# (it reads this exec's stdin itself, through /proc/<this shell>/fd/6) and
# passes its stdout, stderr and exit code through. The last line of stderr
# is always the relay's verdict, written after everything the interpreter
# wrote: `\036SCR-RELAY cold` (it was not there or never took the request:
# nothing ran, take the cold path), `… timeout` (the deadline passed and its
# whole process group was killed), or `… exit <code>`.
scr_relay() {
  d=$1
  scr_waiting "$d"
  exec 4<"$d/out" 5<"$d/err" 6<&0
  cat <&5 >&2 &
  e=$!
  exec 5<&-
  echo $$ >"$d/in"
  # The call is handed over: the next interpreter warms while it runs.
  if [ -n "${SCR_NEXT:-}" ]; then
    (
      exec </dev/null >/dev/null 2>&1 4<&- 6<&-
      SCR_KEEP=$d
      eval "scr_spawn $SCR_NEXT"
    ) &
    SCR_NEXT= SCR_USED=$pid
  fi
  timeout "$2" cat <&4
  rc=$?
  exec 4<&-
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
    # (when it was not started at the hand-over) the next one starts.
    [ -n "${SCR_USED:-}" ] && kill -KILL -"$SCR_USED"
    rm -rf $1
    [ -n "${SCR_NEXT:-}" ] && eval "scr_spawn $SCR_NEXT"
  ) &
  printf '\036SCR-RELAY %s\n' "$2" >&2
  exit "$3"
}
