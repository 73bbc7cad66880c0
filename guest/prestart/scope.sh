# sandbox-code-runner: node's scope servers, the shell side (sourced after
# relay_fork.sh and as_guest.sh by every node exec that starts them or
# relays a call into one: `sh -c <relay_fork.sh + as_guest.sh + this file
# + one command>`).
#
# One dispatcher per VM (scope.mjs, root's, in its own session) keeps a
# server per call slot and a spare (<keep>), each a guest-user node
# process that runs one call at a time in a fresh worker thread it started
# ahead: a fresh scope per call without a process start. A relay is shell
# builtins and one `rm`: it claims a slot, hands the dispatcher its pid and
# budget, and waits for `done <its pid>` on the slot's `life`; the
# dispatcher gives the exec's own streams to a server (nothing is copied),
# keeps the budget and writes the status. The files:
#
#   $SCR_SCOPES/                root's, 0755: nothing here is the guest's
#     scope.mjs                 the harness (root's, 0644)
#     pid                       the dispatcher's pid, as its start wrote it
#     in                        the dispatcher's FIFO, held by it as fd 3
#                               from before its first moment
#     servers                   each server's pid and state (a look from
#                               outside: nothing on a call's path reads it)
#     wrappers/                 the wrappers' definitions, for the servers
#     <k>.claim                 slot <k>'s relay ($$, noclobber)
#     <k>/life                  slot <k>'s FIFO: `done <relay pid>` lines
#     <k>/status.<relay pid>    how that relay's call ended (`137` once a
#                               server took it, then its exit code, or
#                               `timeout`; none: nothing ran)
#     .fill                     the fills' lock (flock)
#
# Root never reads or writes through a path the guest can change: the
# servers' own files are under /tmp/.scr-scope-*, theirs alone.

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

# scr_dispatcher: the dispatcher lives ($p: its pid). A live one holds `in`
# as fd 3 from its first moment; a dead one (a zombie too) holds nothing.
scr_dispatcher() {
  p=
  read -r p 2>/dev/null <"$SCR_SCOPES/pid"
  [ -n "$p" ] && [ -e "/proc/$p/fd/3" ]
}

# scr_claim <file> <pid>: <file> made, holding <pid>, if no one made it
# first (noclobber: one shell wins each, in shell builtins), so no slot
# has two relays reading its `life` at once.
scr_claim() {
  set -C
  { echo "$2" >"$1"; } 2>/dev/null
  r=$?
  set +C
  return "$r"
}

# scr_scope_fill <keep> <uid:gid> [<prefix argv>…]: slots 0 … <keep>-1 made
# and a dispatcher live that keeps <keep> servers (started if none lives;
# told the count if one does). The exec that carries the harness writes it
# first. <prefix> goes before the dispatcher's argv (an `env -u …` that
# keeps a call's env from it). Claims whose relay is gone are let go (the
# relay that finds no free slot says `cold`, and the worker runs a fill).
# Fills run one at a time, under a lock on .fill (util-linux's flock).
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
    scr_slots "$keep"
    scr_let_go
    if scr_dispatcher; then
      echo "keep $keep" 1<>"$SCR_SCOPES/in"
    else
      scr_end_processes
      scr_start "$@"
    fi
  )
}

# scr_slots <keep>: slots 0 … <keep>-1 each have their `life` FIFO (root's,
# made in one mkdir and one mkfifo).
scr_slots() {
  dirs=
  fifos=
  k=0
  while [ "$k" -lt "$1" ]; do
    if [ ! -p "$SCR_SCOPES/$k/life" ]; then
      dirs="$dirs $SCR_SCOPES/$k"
      fifos="$fifos $SCR_SCOPES/$k/life"
    fi
    k=$((k + 1))
  done
  [ -n "$dirs" ] || return 0
  rm -rf $dirs
  mkdir -m 700 $dirs && mkfifo -m 600 $fifos
}

# scr_let_go: the claims of relays that are gone go. (Only this removes a
# claim that is not its own relay's, under the fills' lock: one holding a
# dead pid never changes under it.)
scr_let_go() {
  for c in "$SCR_SCOPES"/*.claim; do
    [ -e "$c" ] || continue
    h=
    read -r h 2>/dev/null <"$c"
    [ -n "$h" ] && [ ! -e "/proc/$h" ] && rm -f "$c"
  done
}

# scr_end_processes: the node interpreters a warm pool started in this VM
# for runs (relay.sh's, one process per call, under /tmp/.scr/pre) wait
# for no call once its calls go to scope servers: they end, and their
# directories go.
scr_end_processes() {
  for q in /tmp/.scr/pre/*; do
    p=
    read -r p 2>/dev/null <"$q/pid" && kill -KILL -"$p" 2>/dev/null
  done
  rm -rf /tmp/.scr/pre
}

# scr_start [<prefix argv>…]: the dispatcher, fresh: what is left of an
# earlier one goes (its servers end with it), and it starts as root in its
# own session, holding `in` from its first moment, so a relay may hand it
# a call as soon as its pid is written. Its servers run as $u:$g ("- -":
# the user namespace has no other user).
scr_start() {
  p=
  read -r p 2>/dev/null <"$SCR_SCOPES/pid" && kill -KILL -"$p" 2>/dev/null
  rm -f "$SCR_SCOPES/pid" "$SCR_SCOPES/in" "$SCR_SCOPES/servers"
  mkfifo -m 600 "$SCR_SCOPES/in" || return 0
  ids="$u $g"
  [ -n "$as_guest" ] || ids="- -"
  (
    exec 3<>"$SCR_SCOPES/in"
    (cd /tmp && exec "$@" setsid node "$SCR_SCOPES/scope.mjs" dispatch "$SCR_SCOPES" "$keep" $ids \
      </dev/null >/dev/null 2>&1 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-) &
    echo $! >"$SCR_SCOPES/pid"
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

# scr_scope <keep> <budget ms>: one call, through the dispatcher; the
# verdict (relay_fork.sh's scr_status) is root's: `cold` when nothing ran
# (no dispatcher, no free slot, or no server took it before the budget),
# `timeout` when the dispatcher's deadline passed, else `exit <code>`.
# The exec's streams are held on fds 6-8 for the dispatcher to open. The
# relay holds `life` read-write (the open never blocks, and no moment
# without the dispatcher's writer reads as an end: a call the dispatcher
# is about to run is never said `cold`); a dispatcher that dies leaves the
# relay to the exec's deadline. Lines on `life` name their relay: one an
# earlier relay left unread is skipped.
scr_scope() {
  scr_scopes_own && scr_dispatcher || scr_told cold 0
  scr_sdk_package
  k=
  i=0
  while [ "$i" -lt "$1" ]; do
    scr_claim "$SCR_SCOPES/$i.claim" "$$" && k=$i && break
    i=$((i + 1))
  done
  [ -n "$k" ] || scr_told cold 0
  D=$SCR_SCOPES/$k
  if ! command exec 4<>"$D/life" 6<&0 7>&1 8>&2; then
    rm -f "$SCR_SCOPES/$k.claim"
    scr_told cold 0
  fi
  echo "$$ $2 $k" 1<>"$SCR_SCOPES/in"
  while read -r said who <&4; do
    [ "$said $who" = "done $$" ] && break
  done
  exec 4<&- 6<&- 7>&- 8>&-
  scr_ran "$D"
  rm -f "$SCR_SCOPES/$k.claim"
  scr_status "$st"
}
