# sandbox-code-runner: the pre-started interpreter's shell side, sourced by
# every exec that starts or uses one (`sh -c <this file + one command>`).
#
# A pre-started interpreter waits in its own session (setsid), with its
# generation directory /tmp/.scr/pre/<n>/ holding two FIFOs it keeps open
# read-write (so opening them never blocks while it lives): `in` (fd 3) and
# `life` (fd 4, never written: its end is the end of the call); plus `pid`,
# and `pipe`, a FIFO a node interpreter warms its pipe streams on.
# It has loaded its wrapper harness and the iii SDK module, connected
# nothing, and holds no token. A call hands it the relay's pid and budget
# (relay_fork.sh: python's fork server forks a child for it, a node
# interpreter takes it itself); the interpreter reads the request (a JSON
# header line and the exec's stdin bytes) from the relay's
# /proc/<pid>/fd/6 and reopens the exec's stdout and stderr from its fds 7
# and 8, so nothing is copied. A node interpreter also writes `ready` once
# it can take a call, and `warm` once all it loads ahead is loaded.

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
  scr_own || return 0
  for p in "$SCR_PRE"/*/pid; do
    [ -e "$p" ] || continue
    q=${p%/pid}
    read -r q_pid 2>/dev/null <"$p" && kill -KILL -"$q_pid" 2>/dev/null
    rm -rf "$q"
  done
  scr_start "$n" "$@"
}

# scr_add <dir> <interpreter argv…>: one more python fork server, beside
# the ones serving calls now: a runtime that runs several calls at once
# keeps one per call slot (the worker counts them and asks for no more).
scr_add() {
  n=$1
  shift
  scr_own || return 0
  scr_start "$n" "$@"
}

# scr_retire <dir>: ends the fork server of <dir> (run at a relay's verdict,
# when that server is replaced: it started before the SDK was planted).
scr_retire() {
  p=
  read -r p 2>/dev/null <"$1/pid" && kill -KILL -"$p" 2>/dev/null
  rm -rf "$1"
}

# scr_fill <base> <keep> <interpreter argv…>: node's: a node interpreter
# serves one call, and starting one takes longer than a call, so <keep>
# wait (the worker asks for one more than the runtime's call slots): each
# call takes one, and the next call, even straight after it, finds another
# ready while a new one warms (started here, at the verdict: never more
# than <keep> exist). Keeps <keep> live ones (waiting, or serving a call:
# that one is its relay's to remove), removes the rest, and starts
# <base>.0, <base>.1, … as needed. Fills run one at a time (a verdict's
# fill may still run when the next call's verdict comes), under a lock on
# .fill, taken with util-linux's flock (like setsid, in any Debian-based
# image); without it they run as they come. (Ones started before the SDK
# was planted serve a call each, as a cold start would: the wrapper loads
# the SDK itself.)
scr_fill() {
  n=$1
  keep=$2
  shift 2
  scr_own || return 0
  # Node starts from this file (a relay does not carry the harness): the
  # exec that does writes it, whole or not at all.
  if [ -n "${SCR_HARNESS:-}" ]; then
    printf '%s' "$SCR_HARNESS" >"$SCR_PRE/ready.mjs.$$" &&
      mv -f "$SCR_PRE/ready.mjs.$$" "$SCR_PRE/ready.mjs"
  fi
  (
    exec 9>"$SCR_PRE/.fill"
    flock 9 2>/dev/null
    # Busy ones (claimed by a relay that still runs, or serving a call)
    # are counted first and never touched: a relay removes its own, once
    # it has read its status there. Waiting ones are kept up to what
    # makes <keep>; the rest go: dead ones, ones too many, and ones a relay
    # claimed and left (it was killed), which nothing would end.
    live=0
    for q in "$SCR_PRE"/*; do
      [ -d "$q" ] && scr_runs "$q" || continue
      if scr_held "$q" || { [ ! -e "/proc/$p/fd/3" ] && [ ! -e "$q/claim" ]; }; then
        live=$((live + 1))
      fi
    done
    for q in "$SCR_PRE"/*; do
      { [ ! -d "$q" ] || scr_held "$q"; } && continue
      if scr_runs "$q"; then
        if [ -e "$q/claim" ]; then
          # A relay may have claimed it since it was looked at: only a
          # claim whose shell is gone is ended.
          scr_held "$q" && continue
        else
          [ -e "/proc/$p/fd/3" ] || continue
          [ "$live" -lt "$keep" ] && { live=$((live + 1)); continue; }
          # One too many: claimed first, so that no relay is handed it.
          scr_claim "$q" "$$" || continue
        fi
      fi
      scr_drop "$q" "$p"
    done
    # What makes <keep> is counted again: relays may have claimed waiting
    # ones since (a claim changes no count, and the total is what is kept).
    live=0
    for q in "$SCR_PRE"/*; do
      [ -d "$q" ] && scr_runs "$q" && live=$((live + 1))
    done
    k=0
    while [ "$live" -lt "$keep" ]; do
      scr_start "$n.$k" "$@"
      live=$((live + 1))
      k=$((k + 1))
    done
  )
}

# scr_runs <dir>: the interpreter <dir>/pid names runs; $p is that pid
# either way (empty without one), for what ends it.
scr_runs() {
  p=
  read -r p 2>/dev/null <"$1/pid"
  [ -n "$p" ] && [ -e "/proc/$p/exe" ]
}

# scr_own: $SCR_PRE and its parent (the worker's /tmp/.scr) exist, and are
# directories of this shell's user (root in a VM) that no guest can have
# made or changed, so what waits in them loads nothing a guest wrote (guest
# code runs as another user, after its wrapper made sure of /tmp/.scr).
# Otherwise nothing is started: the calls run cold.
scr_own() {
  mkdir -p "$SCR_PRE" 2>/dev/null
  for q in "${SCR_PRE%/*}" "$SCR_PRE"; do
    [ "$q" = /tmp ] && continue
    [ -d "$q" ] && [ ! -h "$q" ] && [ -O "$q" ] || return 1
  done
  # Root's alone: every interpreter opens what it needs here before it
  # drops, and guest code must not open another call's FIFOs.
  chmod 700 "$SCR_PRE"
}

# scr_start <dir> <interpreter argv…>: one waiting interpreter in <dir>, in
# its own session, holding <dir>'s FIFOs read-write (so opening them never
# blocks while it lives); what it writes before it has a call goes nowhere.
scr_start() {
  at=$1
  shift
  mkdir -p "$at" 2>/dev/null && mkfifo "$at/in" "$at/life" "$at/pipe" 2>/dev/null || return 0
  # Its FIFOs are opened before the fork (in a subshell, so that nothing
  # of the caller's fds changes): the interpreter holds them from its
  # first moment, before its pid is written. A relay may hand it a call
  # as soon as the pid is there, and a line written to a FIFO that nobody
  # holds is dropped when the writer closes it: opened in the child, a
  # start slower than the relay lost the call, and the relay waited out
  # its budget. Nothing else of the exec that starts it: an fd it kept
  # open (a relay's 6-8 hold this exec's streams) would keep the exec
  # from ending.
  (
    exec 3<>"$at/in" 4<>"$at/life"
    (cd /tmp && exec setsid "$@" "$at" </dev/null >/dev/null 2>&1 5>&- 6>&- 7>&- 8>&- 9>&-) &
    echo $! >"$at/pid"
  )
}

# scr_drop <dir> [<pid>]: <dir> and the interpreter <pid> go. The directory
# is moved out of sight first (its claim with it): removed in place, a
# relay could claim it again between rm's unlinking the claim and the
# directory.
scr_drop() {
  gone="$SCR_PRE/.gone.$$.${1##*/}"
  mv -f "$1" "$gone" 2>/dev/null || return 0
  [ -n "${2:-}" ] && kill -KILL -"$2" 2>/dev/null
  rm -rf "$gone"
}

# scr_pick <generation dir>: $d and $pid are the node interpreter to use:
# a warm one (it wrote <dir>/warm: all it loads ahead is loaded), else a
# ready one (<dir>/ready: its wrappers are loaded; the rest is in flight
# and a call shares it), else one still starting, the worker's latest
# generation first each time; a live one holds fd 3, `in`, until it has a
# request (a dead one, a zombie too, holds nothing). Relays at once claim
# theirs: <dir>/claim, created only if absent (noclobber: one relay wins
# each, in shell builtins), so each takes its own. If there is none, the
# call ends here, cold.
scr_pick() {
  d=
  pid=
  for mark in warm ready pid; do
    for q in "$1".* "$SCR_PRE"/*; do
      [ -e "$q/$mark" ] && [ ! -e "$q/claim" ] || continue
      p=
      read -r p 2>/dev/null <"$q/pid" || continue
      [ -n "$p" ] && [ -e "/proc/$p/fd/3" ] || continue
      scr_claim "$q" "$$" || continue
      d=$q
      pid=$p
      return 0
    done
  done
  scr_told cold 0
}

# scr_claim <dir> <pid>: <dir>/claim made, holding <pid>, if no one made
# it first (noclobber: one shell wins each, in shell builtins): a relay
# claims the interpreter it hands a call, a fill one it removes, so none is
# handed twice or removed under a call.
scr_claim() {
  set -C
  { echo "$2" >"$1/claim"; } 2>/dev/null
  r=$?
  set +C
  return "$r"
}

# scr_held <dir>: <dir> is claimed by a shell that still runs (or one that
# has not yet written its pid): it is that shell's to remove.
scr_held() {
  [ -e "$1/claim" ] || return 1
  c=
  read -r c 2>/dev/null <"$1/claim"
  [ -z "$c" ] || [ -e "/proc/$c" ]
}

# scr_relay <generation dir> <budget seconds>: hands a waiting node
# interpreter (scr_pick) this shell's pid; it takes this exec's stdin,
# stdout and stderr itself (through /proc/<this shell>/fd/{6,7,8}), so
# nothing is copied, and writes "137" to <dir>/status.<this shell's pid>
# once it has (from then on the call counts as run), its exit code when it
# is done. The call's end is the end of `life`. A watchdog says `timeout`
# on `life` once the budget passes: then the interpreter's whole session is
# killed. The hand-over and the verdict are relay_fork.sh's (scr_hand,
# scr_status).
scr_relay() {
  scr_pick "$1"
  SCR_USED=$pid
  scr_hand "$d" $$
  # Forked after the hand-over, while the call runs. It also does what
  # follows the call (scr_after) once told (TERM) or once the budget
  # passed, so the verdict forks nothing; until it is armed (its trap
  # set), the verdict does that itself. A `sleep` it started goes with it.
  (
    exec </dev/null >/dev/null 2>&1 4<&- 6<&- 7>&- 8>&-
    trap 'kill $! 2>/dev/null; scr_after; exit 0' TERM
    : >"$d/armed"
    sleep "$2" &
    wait $! || exit 0
    echo timeout 1<>"$d/life"
    scr_after
  ) &
  w=$!
  said=
  read -r said <&4
  if [ "$said" = timeout ]; then
    SCR_AFTER=watchdog
    kill -KILL -"$pid" 2>/dev/null
    while read -r _ <&4; do :; done
    scr_told timeout 124
  fi
  exec 4<&-
  # The status is read before the watchdog is told: scr_after removes it.
  scr_ran "$d"
  [ -e "$d/armed" ] && SCR_AFTER=watchdog
  kill "$w" 2>/dev/null
  scr_status "$st"
}
