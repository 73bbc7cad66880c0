# sandbox-code-runner: node's scope servers, the shell side (sourced after
# relay_fork.sh and as_guest.sh by every node exec that starts one or
# relays a call into one: `sh -c <relay_fork.sh + as_guest.sh + this file
# + one command>`).
#
# A scope server (scope.mjs) is a long-lived node process of the guest
# user, one per call slot and one spare (<keep>), each in its own session.
# It runs each call it is handed in a fresh worker thread it started ahead
# (wrappers loaded, the iii SDK too when calls use it), and starts the next
# one once the call has ended: a fresh scope per call without a process
# start. Its files:
#
#   $SCR_SCOPES/                root's, 0755: nothing here is the guest's
#     scope.mjs                 the harness (root's, 0644)
#     <k>.pid                   server <k>'s pid, as its start wrote it
#     <k>.claim                 the relay that uses server <k> ($$, noclobber)
#     report.<relay pid>        the guest half's report (a guest file)
#     late.<relay pid>          root's own mark: the budget passed
#     .fill                     the fills' lock (flock)
#   $SCR_SCOPES/<k>/            the server's, 0700: `in` and `life` FIFOs
#                               (made by root and held from before the
#                               server's first moment), `ready` (a fresh
#                               scope waits), status.<guest half pid>,
#                               the wrappers' definitions
#
# A relay (scr_scope, root) claims a live server, gives the exec's pipes to
# the guest user and runs its guest half as that user (setpriv): the half
# holds the exec's streams on fds 6-8 for the server to reopen through
# /proc (nothing is copied), hands the server its pid on `in` and waits for
# `done <pid>` on `life`; the server writes "137" to status.<pid> once it
# took the call and the exit code once done. Root keeps the budget itself:
# at the deadline it kills the server's session and the half, and says
# `timeout`; the server is started again off the call's path. Root never
# reads or writes through a path the guest can change: only its own
# directory, and a report file it made there.

SCR_SCOPES=${SCR_SCOPES:-/tmp/.scr/scope}

# scr_scopes_own: $SCR_SCOPES and its parent are directories of this
# shell's user (root) that no guest made or can change.
scr_scopes_own() {
  for q in "${SCR_SCOPES%/*}" "$SCR_SCOPES"; do
    # (Every relay asks: `mkdir` runs only when one is missing.)
    [ -e "$q" ] || mkdir -m 755 "$q" 2>/dev/null
    [ -d "$q" ] && [ ! -h "$q" ] && [ -O "$q" ] || return 1
  done
}

# scr_live <k>: server <k> lives ($p: its pid). A live one holds `in` as
# fd 3 from its first moment; a dead one (a zombie too) holds nothing.
scr_live() {
  p=
  read -r p 2>/dev/null <"$SCR_SCOPES/$1.pid"
  [ -n "$p" ] && [ -e "/proc/$p/fd/3" ]
}

# scr_held <k>: a relay that still runs claims server <k> (or one that has
# not written its pid yet).
scr_held() {
  [ -e "$SCR_SCOPES/$1.claim" ] || return 1
  c=
  read -r c 2>/dev/null <"$SCR_SCOPES/$1.claim"
  [ -z "$c" ] || [ -e "/proc/$c" ]
}

# scr_claim <file> <pid>: <file> made, holding <pid>, if no one made it
# first (noclobber: one shell wins each, in shell builtins), so no server
# is handed two calls at once.
scr_claim() {
  set -C
  { echo "$2" >"$1"; } 2>/dev/null
  r=$?
  set +C
  return "$r"
}

# scr_scope_fill <keep> <uid:gid> [<prefix argv>…]: servers 0 … <keep>-1
# live, each started if it does not (the exec that carries the harness
# writes it first). <prefix> goes before the server's argv (an `env -u …`
# that keeps a call's env from it). Fills run one at a time, under a lock
# on .fill (util-linux's flock; without it they run as they come, and a
# start checks again under nothing worse than a second server's start).
scr_scope_fill() {
  keep=$1
  scr_ids "$2" && scr_scopes_own && scr_as_guest || return 0
  shift 2
  if [ -n "${SCR_HARNESS:-}" ]; then
    printf '%s' "$SCR_HARNESS" >"$SCR_SCOPES/scope.mjs.$$" &&
      chmod 644 "$SCR_SCOPES/scope.mjs.$$" &&
      mv -f "$SCR_SCOPES/scope.mjs.$$" "$SCR_SCOPES/scope.mjs"
  fi
  [ -e "$SCR_SCOPES/scope.mjs" ] || return 0
  scr_sdk_package
  (
    exec 9>"$SCR_SCOPES/.fill"
    flock 9 2>/dev/null
    k=0
    while [ "$k" -lt "$keep" ]; do
      scr_live "$k" || scr_held "$k" || scr_start "$k" "$@"
      k=$((k + 1))
    done
  )
}

# scr_sdk_package: the SDK bundle's package.json (the bundle reads
# ../package.json; the worker plants only the bundle), written as root
# once the bundle is there: the guest may not write the SDK's directory.
scr_sdk_package() {
  b=${SCR_NODE_SDK_DIR:-/node_modules/iii-sdk}
  [ -e "$b/dist/index.mjs" ] && [ ! -e "$b/package.json" ] || return 0
  printf '%s' '{"name":"iii-sdk","version":"0.22.1","type":"module","main":"./dist/index.mjs","exports":{".":"./dist/index.mjs"}}' \
    >"$b/package.json" 2>/dev/null
}

# scr_start <k> [<prefix argv>…]: server <k>, fresh: what was left of an
# earlier one goes, its directory is made (root's until its FIFOs are
# open, then the guest's), and the server starts as the guest in its own
# session, holding `in` and `life` from its first moment, so a relay may
# hand it a call as soon as its pid is written.
scr_start() {
  k=$1
  shift
  D=$SCR_SCOPES/$k
  p=
  read -r p 2>/dev/null <"$SCR_SCOPES/$k.pid" && kill -KILL -"$p" 2>/dev/null
  rm -rf "$D" "$SCR_SCOPES/$k.pid" "$SCR_SCOPES/$k.claim"
  mkdir -m 700 "$D" && mkfifo -m 600 "$D/in" "$D/life" || return 0
  (
    exec 3<>"$D/in" 4<>"$D/life"
    chown -R "$u:$g" "$D" || exit 0
    (cd /tmp && exec "$@" $as_guest setsid node "$SCR_SCOPES/scope.mjs" "$D" "$keep" \
      </dev/null >/dev/null 2>&1 5>&- 6>&- 7>&- 8>&- 9>&-) &
    echo $! >"$SCR_SCOPES/$k.pid"
  )
}

# scr_scope <keep> <budget seconds> <uid:gid>: one call, handed to a live
# server no other relay claims (a `ready` one first), as the guest; the
# verdict (relay_fork.sh's scr_told) is root's: `cold` when no server
# could take it (nothing ran), `timeout` when root's deadline passed,
# else `exit <code>`. A server that is gone after the call (timed out, or
# its process ended) is started again, after the verdict.
scr_scope() {
  keep=$1
  budget=$2
  scr_ids "$3" && scr_scopes_own && scr_as_guest || scr_told cold 0
  SCR_NEXT="scr_scope_fill $keep $3"
  scr_sdk_package
  k=
  for mark in ready ''; do
    i=0
    while [ "$i" -lt "$keep" ]; do
      if [ -z "$mark" ] || [ -e "$SCR_SCOPES/$i/$mark" ]; then
        if scr_live "$i" && scr_claim "$SCR_SCOPES/$i.claim" "$$"; then
          scr_live "$i" && k=$i && break 2
          rm -f "$SCR_SCOPES/$i.claim"
        fi
      fi
      i=$((i + 1))
    done
  done
  [ -n "$k" ] || scr_told cold 0
  report=$SCR_SCOPES/report.$$
  [ -e "$SCR_SCOPES/late.$$" ] && rm -f "$SCR_SCOPES/late.$$"
  if ! scr_hand_over "$report"; then
    rm -f "$report" "$SCR_SCOPES/$k.claim"
    scr_told cold 0
  fi
  # (A background list's stdin is /dev/null unless it says otherwise, and
  # it says so through a copy: `<&0` would copy /dev/null.)
  exec 5<&0
  SCR_REPORT=$report $as_guest sh -c "$scr_half" sh "$SCR_SCOPES/$k" <&5 5<&- &
  half=$!
  exec 5<&-
  (
    exec </dev/null >/dev/null 2>&1 6>&- 7>&- 8>&-
    trap 'kill $! 2>/dev/null; exit 0' TERM
    sleep "$budget" &
    wait $! || exit 0
    # Fired: what follows is done whole, and the relay waits for it.
    trap '' TERM
    : >"$SCR_SCOPES/late.$$"
    kill -KILL -"$p" "$half" 2>/dev/null
    # A killed process holds its fds until it has exited: the refill
    # after the verdict must not find it live (then nothing starts the
    # slot's server again). Waited for, up to 2 s.
    n=0
    while [ -e "/proc/$p/fd/3" ] && [ "$n" -lt 200 ]; do
      sleep 0.01
      n=$((n + 1))
    done
  ) &
  w=$!
  # (Quiet: the shell would report a half the deadline killed.)
  { wait "$half"; } 2>/dev/null
  kill "$w" 2>/dev/null
  wait "$w"
  said=
  read -r said 2>/dev/null <"$report"
  rm -f "$report" "$SCR_SCOPES/$k.claim"
  if [ -e "$SCR_SCOPES/late.$$" ]; then
    rm -f "$SCR_SCOPES/late.$$"
    scr_told timeout 124
  fi
  scr_live "$k" && SCR_NEXT=
  case $said in
    'exit '*)
      st=${said#exit }
      case $st in '' | *[!0-9]*) st=137 ;; esac
      scr_told "exit $st" "$st"
      ;;
  esac
  # Handed, and no status came back: the server did not take the call,
  # or ended before it said so. Never `cold` (guest code could have said
  # that): the call counts as run, and failed.
  echo "sandbox-code-runner: the scope server ended before it took the call" >&2
  scr_told "exit 1" 1
}

# The guest half, as the guest user: sh -c "$scr_half" sh <server dir>,
# with SCR_REPORT naming the report file. `life` is opened for reading
# while held read-write for a moment, so neither open blocks; a server
# that is gone reads as its end. Lines on `life` name their call: one an
# earlier call left unread is skipped.
scr_half='
D=$1
R=$SCR_REPORT
unset SCR_REPORT
command exec 9<>"$D/life" 4<"$D/life" 9>&- 6<&0 7>&1 8>&2 || exit 0
echo "$$" 1<>"$D/in"
said=
while read -r said who <&4; do
  [ "$who" = $$ ] && break
  said=
done
exec 4<&-
st=
read -r st 2>/dev/null <"$D/status.$$"
rm -f "$D/status.$$"
case $st in
  "") ;;
  *[!0-9]*) printf "exit 137\n" >"$R" ;;
  *) printf "exit %s\n" "$st" >"$R" ;;
esac
'
