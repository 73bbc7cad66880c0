# sandbox-code-runner: a streamed run's exec, as root, before the run's own
# command (the relay, the turn or the wrapper: "$@", exec'd, so it keeps
# this shell's pid). The code's stdout and stderr still reach the exec's
# own streams, whole (its answer is what it would be unstreamed), through
# one `tee` each, which also copies the first <cap> bytes of each stream
# to <dir>/1 and <dir>/2 (past <cap>, RLIMIT_FSIZE stops the copy and tee
# goes on with the exec's stream alone) for the worker's follower execs to
# read while the run goes on (follow.sh). Once nothing writes a stream any
# more, its tee ends and <dir>/1.end (2.end) says <gen>, this exec's name
# (as <dir>/gen does from the start: the copies are this exec's).
#
# <dir> is root's (0700) and serves one exec at a time (a VM runs one
# streamed run at a time, and a run's execs one after another): its FIFOs
# are made once per VM, its copies are emptied here, so what the VM keeps
# between runs is at most the last run's copies. If the copy cannot be
# made, the run goes on as without streaming.
# Usage: sh -c "$TEE" sh <dir> <gen> <cap> <command…>
d=$1 gen=$2 cap=$3
shift 3
fifos() {
  [ -p "$d/o" ] && [ -p "$d/e" ] && [ -O "$d" ] && return 0
  # The exec's umask stays the command's: /tmp/.scr, if this makes it, is
  # 0755 as every other maker leaves it; only <dir> is root's alone.
  (umask 022 && mkdir -p "${d%/*}") || return 1
  [ -d "$d" ] || mkdir -m 700 "$d" || return 1
  [ -O "$d" ] && rm -f "$d/o" "$d/e" && mkfifo -m 600 "$d/o" "$d/e"
}
if fifos; then
  # POSIX `ulimit -f` counts 512-byte blocks. tee writes the exec's stream
  # first; a copy's write past the limit fails (EFBIG, the signal ignored)
  # and tee drops only that output.
  # (The copies' modes do not matter: no one but root passes <dir>.)
  blocks=$(((cap + 511) / 512))
  : >"$d/1"
  : >"$d/2"
  echo "$gen" >"$d/gen"
  (ulimit -f "$blocks"; trap '' XFSZ; tee -a "$d/1" <"$d/o"; echo "$gen" >"$d/1.end") </dev/null 2>/dev/null &
  (ulimit -f "$blocks"; trap '' XFSZ; tee -a "$d/2" <"$d/e" >&3; echo "$gen" >"$d/2.end") </dev/null 3>&2 >/dev/null 2>&1 &
  exec >"$d/o" 2>"$d/e"
fi
exec "$@"
