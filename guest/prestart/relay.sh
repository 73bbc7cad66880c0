# sandbox-code-runner: the pre-started interpreter's shell side, sourced by
# every exec that starts or uses one (`sh -c <this file + one command>`).
#
# A pre-started interpreter waits in its own session (setsid), with its
# generation directory /tmp/.scr/pre/<n>/ holding three FIFOs it keeps open
# read-write (so opening them never blocks while it lives): `in` (fd 3, the
# request), `out` (fd 1) and `err` (fd 2); plus `pid`. It has loaded its
# wrapper harness and the iii SDK module, connected nothing, and holds no
# token. A call hands it one request: a JSON header line and the exec's
# stdin bytes. It writes `taken` when it has read the request, and `status`
# (its exit code) when it exits.

SCR_PRE=/tmp/.scr/pre

# scr_spawn <dir> <interpreter argv…>: starts one waiting interpreter in <dir>,
# after killing every other waiting one except $SCR_USING (the one a call is
# using), so a VM never holds more than two.
scr_spawn() {
  n=$1
  shift
  for p in "$SCR_PRE"/*/pid; do
    [ -e "$p" ] || continue
    q=${p%/pid}
    [ "$q" = "${SCR_USING:-}" ] && continue
    kill -KILL -"$(cat "$p" 2>/dev/null)" 2>/dev/null
    rm -rf "$q"
  done
  mkdir -p "$n" 2>/dev/null && mkfifo "$n/in" "$n/out" "$n/err" 2>/dev/null || return 0
  (cd /tmp && exec setsid "$@" "$n" </dev/null 3<>"$n/in" 1<>"$n/out" 2<>"$n/err") &
  echo $! >"$n/pid"
}

# scr_alive <pid>: the process exists and is not a zombie (an orphan's
# zombie lingers until PID 1 reaps it).
scr_alive() {
  [ -n "$1" ] || return 1
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  case ${s%% *} in Z | X | x | "") return 1 ;; esac
}

# scr_relay <dir> <seconds>: hands this exec's stdin to the interpreter in
# <dir> and passes its stdout, stderr and exit code through. The last line
# of stderr is always the relay's verdict, written after everything the
# interpreter wrote: `\036SCR-RELAY cold` (it was not there or never took
# the request: nothing ran, take the cold path), `… timeout` (the deadline
# passed and its whole process group was killed), or `… exit <code>`.
scr_relay() {
  d=$1
  pid=$(cat "$d/pid" 2>/dev/null)
  scr_alive "$pid" || scr_verdict "$d" cold 0
  exec 4<"$d/out" 5<"$d/err"
  cat <&5 >&2 &
  e=$!
  cat >"$d/in" 2>/dev/null
  exec 5<&-
  timeout "$2" cat <&4
  rc=$?
  exec 4<&-
  if [ "$rc" = 124 ]; then
    kill -KILL -"$pid" 2>/dev/null
    wait "$e"
    scr_verdict "$d" timeout 124
  fi
  wait "$e"
  [ -e "$d/taken" ] || scr_verdict "$d" cold 0
  st=$(cat "$d/status" 2>/dev/null)
  st=${st:-137}
  scr_verdict "$d" "exit $st" "$st"
}

scr_verdict() {
  rm -rf "$1"
  printf '\036SCR-RELAY %s\n' "$2" >&2
  exit "$3"
}
