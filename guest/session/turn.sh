# sandbox-code-runner (after as_guest.sh): one run into a session (a kept runtime whose
# interpreter keeps its globals between runs), as one exec:
#   sh -c 'eval "$SCR_TURN"' sh root <guest uid:gid> <budget s> <lang> [<harness>]
# with this file as SCR_TURN and the run's request on stdin (a header line
# {"script": <wrapper>, "env": {..}, "stdin": <n>}, then the n bytes of code).
#
# As root it makes sure of the session's directory, /tmp/.scr/session
# (in root's /tmp/.scr, which no guest can change; the directory itself is
# the guest's), looks whether an interpreter lives there, and runs the rest
# of the turn as the guest user (setpriv, util-linux, in every Debian-based
# image), as the session's interpreter runs, so guest code can do nothing
# to it that it could not do to itself. Root stays as the turn's parent
# only to write the verdict, with the exec's key (SCR_VERDICT_KEY, moved
# into a variable before anything starts): guest code shares stderr and
# the guest half's every file, so only root's line counts.
#
# As the guest: when no interpreter lives in the directory it starts one
# with the harness (root has seen one live when none came: if it died
# since, the turn ends `lost`), in its own session, holding the FIFOs `in` (fd 3) and `life` (fd 4)
# read-write. It hands the interpreter this shell's pid on `in`; the
# interpreter reads the request from this shell's fd 6 and writes through
# its fds 7 and 8 (/proc/<pid>/fd: nothing is copied), writes "137" to
# status.<pid> once it took the run and the run's exit code once done, then
# says `done <pid>` on `life` (its end is the interpreter's). A watchdog
# says `timeout <pid>` there once the budget passed: the interpreter's
# whole session is killed, and the next run starts a fresh one on the same
# files. The guest half reports "<new|continued> <exit N|timeout|lost>"
# in the report file root made for it; root's verdict on stderr is
# "\036SCR-SESSION <key> <new|continued> <exit N|timeout|lost|gone>".
# `gone` is root's own finding (no interpreter lives, and no harness came:
# nothing was handed, so the worker sends the run again with it); `lost`,
# after the run was handed, is never sent again (guest code could have
# said it).

# (SCR_SESSION, set in the exec's env, moves it: for tests on a host.)
SCR_SESSION=${SCR_SESSION:-/tmp/.scr/session}

# Root's: the key, out of the env before anything starts.
scr_key=${SCR_VERDICT_KEY:-}
unset SCR_VERDICT_KEY

# scr_verdict <new|continued> <exit N|timeout|lost|gone>: root's verdict
# line, then the exec's end.
scr_verdict() {
  printf '\036SCR-SESSION %s %s %s\n' "$scr_key" "$1" "$2" >&2
  case $2 in
    exit\ *) exit "${2#exit }" ;;
    timeout) exit 124 ;;
  esac
  exit 0
}

# scr_live: whether the session's interpreter lives ($p: its pid, from
# the pid file). A live one holds fd 3; a dead one (a zombie too) holds
# nothing.
scr_live() {
  p=
  read -r p 2>/dev/null <"$SCR_SESSION/pid"
  [ -n "$p" ] && [ -e "/proc/$p/fd/3" ]
}

# scr_said <words>: what the guest half reported, as root believes it:
# only the shapes it may report (a report it could not write is `lost`).
scr_said() {
  was=${1%% *}
  what=${1#* }
  case $was in new | continued) ;; *) was=continued what=lost ;; esac
  case $what in
    timeout | lost) ;;
    exit\ *)
      case ${what#exit } in '' | *[!0-9]*) what=lost ;; esac
      ;;
    *) what=lost ;;
  esac
  scr_verdict "$was" "$what"
}

# scr_turn_root <uid:gid> <budget> <lang> [<harness>]
scr_turn_root() {
  scr_ids "$1" || scr_refused "$why"
  root=${SCR_SESSION%/*}
  [ -e "$root" ] || mkdir -m 755 "$root" 2>/dev/null
  [ -d "$root" ] && [ ! -h "$root" ] && [ -O "$root" ] || scr_refused "$root is not root's"
  if [ -h "$SCR_SESSION" ] || { [ -e "$SCR_SESSION" ] && [ ! -d "$SCR_SESSION" ]; }; then
    rm -f "$SCR_SESSION"
  fi
  if [ ! -d "$SCR_SESSION" ]; then
    mkdir -m 700 "$SCR_SESSION" && chown "$u:$g" "$SCR_SESSION" ||
      scr_refused "cannot make $SCR_SESSION"
  fi
  # Without the harness a turn can only hand the run to a live
  # interpreter. None: nothing is handed, root says so, and the run comes
  # again.
  [ -n "${4:-}" ] || scr_live || scr_verdict continued gone
  report=$root/turn.$$
  scr_hand_over "$report" || scr_refused "cannot hand the exec's streams over"
  shift
  scr_as_guest || scr_refused "$why"
  SCR_REPORT=$report $as_guest sh -c "$SCR_TURN" sh guest "$@"
  said=
  read -r said 2>/dev/null <"$report"
  rm -f "$report"
  scr_said "$said"
}

scr_refused() {
  echo "sandbox-code-runner: not running the session: $1" >&2
  scr_verdict new "exit 1"
}

# scr_report <new|continued> <exit N|timeout|lost>: the guest half's end.
scr_report() {
  printf '%s %s\n' "$1" "$2" >"$R"
  exit 0
}

# scr_turn_guest <budget> <lang> [<harness>]
scr_turn_guest() {
  D=$SCR_SESSION
  R=$SCR_REPORT
  unset SCR_REPORT
  was=continued
  if ! scr_live; then
    [ -n "${3:-}" ] || scr_report continued lost
    [ -n "$p" ] && kill -KILL -"$p" 2>/dev/null
    rm -f "$D/in" "$D/life" "$D/pid" "$D/boot.err" "$D"/status.*
    mkfifo -m 600 "$D/in" "$D/life" || scr_report new lost
    # Its FIFOs are opened here, so that it holds `life` from the fork on;
    # and nothing else of this exec (6-8 hold the exec's streams: an fd it
    # kept would keep the exec from ending).
    exec 3<>"$D/in" 5<>"$D/life"
    case $2 in
      python) (cd /tmp && exec setsid python3 -Ic "$3" "$D" </dev/null >/dev/null \
        2>"$D/boot.err" 4<&5 5>&- 6>&- 7>&- 8>&- 9>&-) & ;;
      *) (cd /tmp && exec setsid node --input-type=module -e "$3" "$D" </dev/null >/dev/null \
        2>"$D/boot.err" 4<&5 5>&- 6>&- 7>&- 8>&- 9>&-) & ;;
    esac
    exec 3>&- 5>&-
    p=$!
    echo "$p" >"$D/pid"
    was=new
  fi
  exec 9<>"$D/life" 4<"$D/life" 9>&- 6<&0 7>&1 8>&2
  echo "$$" 1<>"$D/in"
  (
    exec </dev/null >/dev/null 2>&1 4<&- 6<&- 7>&- 8>&-
    trap 'kill $! 2>/dev/null; exit 0' TERM
    sleep "$1" &
    wait $! || exit 0
    echo timeout $$ 1<>"$D/life"
  ) &
  w=$!
  # Lines on `life` name their turn: one an earlier turn's relay left
  # unread is skipped. Its end (no line) is the interpreter's.
  said=
  while read -r said who <&4; do
    [ "$who" = $$ ] && break
    said=
  done
  if [ "$said" = timeout ]; then
    kill -KILL -"$p" 2>/dev/null
    rm -f "$D/pid"
    scr_report "$was" timeout
  fi
  exec 4<&-
  kill "$w" 2>/dev/null
  st=
  read -r st 2>/dev/null <"$D/status.$$"
  rm -f "$D/status.$$"
  case $st in
    '')
      [ "$was" = new ] && cat "$D/boot.err" >&2 2>/dev/null
      scr_report "$was" lost
      ;;
    *[!0-9]*) st=137 ;;
  esac
  scr_report "$was" "exit $st"
}

case $1 in
  root) shift && scr_turn_root "$@" ;;
  guest) shift && scr_turn_guest "$@" ;;
esac
