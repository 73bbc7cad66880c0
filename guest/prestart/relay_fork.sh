# sandbox-code-runner: the relay into python's fork server (ready.py), the
# whole exec of a call that has one waiting: shell builtins only, so the
# call pays for one `sh` and nothing else. (Node's relay, relay.sh's
# scr_relay, ends through scr_status and scr_told here too.)
# scr_relay_fork <dir> <budget ms>: hands the server in <dir> this shell's
# pid and the budget; the child it forks takes this exec's stdin, stdout
# and stderr (reopened through /proc/<this shell>/fd/{6,7,8}), so nothing is
# copied, and writes "137" to <dir>/status.<this shell's pid> once it has
# (from then on the call counts as run). The server enforces the budget
# over the call's process group. The call's end is the end of `life` (held
# by the child, and by the server until it has written the status). The
# verdict is a line on stderr: `\036SCR-RELAY <key> cold` (nothing was
# waiting, or it never took the request: nothing ran), `… timeout`, or
# `… exit <code>`. <key> is the exec's SCR_VERDICT_KEY, moved here into a
# variable no process this relay starts inherits: guest code shares
# stderr, so a line without it is the call's own output.
scr_key=${SCR_VERDICT_KEY:-}
unset SCR_VERDICT_KEY
scr_relay_fork() {
  p=
  read -r p 2>/dev/null <"$1/pid"
  # A live server holds fd 3; a dead one (a zombie too) holds nothing.
  [ -n "$p" ] && [ -e "/proc/$p/fd/3" ] || scr_told cold 0
  scr_hand "$1" "$$ $2"
  while read -r _ <&4; do :; done
  exec 4<&-
  scr_ran "$1"
  scr_status "$st"
}

# scr_hand <dir> <line>: holds this exec's streams on fds 6, 7 and 8 for the
# process that runs the call to reopen (the shell itself may move 0, 1 and 2
# around while it runs commands), opens <dir>'s `life` on fd 4 and hands
# <line> to the interpreter on `in`. Neither open may block, even if the
# interpreter died since it was found: `life` is opened for reading while
# this shell holds it read-write (then an interpreter gone reads as its
# end), `in` read-write. If <dir> is gone (its interpreter died and a fill
# removed it), nothing ran: cold (`command` keeps a failed redirection of
# `exec` from ending the shell).
scr_hand() {
  command exec 9<>"$1/life" 4<"$1/life" 9>&- 6<&0 7>&1 8>&2 || scr_told cold 0
  echo "$2" 1<>"$1/in"
}

# scr_ran <dir>: $st is what <dir>/status.<this shell's pid> says of the
# call (empty when nothing ran).
scr_ran() {
  st=
  read -r st 2>/dev/null <"$1/status.$$"
}

# scr_status <status>: the verdict of a call whose process is done, from
# what it (or its server) wrote to <dir>/status.<this shell's pid>.
scr_status() {
  case $1 in
    '') scr_told cold 0 ;;
    timeout) scr_told timeout 124 ;;
    *[!0-9]*) scr_told "exit 137" 137 ;;
  esac
  scr_told "exit $1" "$1"
}

# scr_told <verdict> <exit code>: the verdict line, then the exec's end.
# What follows the call (scr_after) runs in a shell that holds none of this
# exec's streams, off the call's path: forked here, unless node's watchdog
# does it (SCR_AFTER=watchdog).
scr_told() {
  if [ -n "${SCR_NEXT:-}${SCR_USED:-}" ] && [ "${SCR_AFTER:-}" != watchdog ]; then
    (
      exec </dev/null >/dev/null 2>&1 6>&- 7>&- 8>&-
      scr_after
    ) &
  fi
  printf '\036SCR-RELAY %s %s\n' "$scr_key" "$1" >&2
  exit "$2"
}

# scr_after: what is left of a node interpreter the call used (SCR_USED,
# its session, and its directory $d: this relay's alone, it claimed it) goes,
# and a relay whose interpreter is to be replaced (SCR_NEXT, with relay.sh
# sourced) starts the next one.
scr_after() {
  [ -n "${SCR_USED:-}" ] && scr_drop "$d" "$SCR_USED"
  [ -n "${SCR_NEXT:-}" ] && eval "$SCR_NEXT"
}
