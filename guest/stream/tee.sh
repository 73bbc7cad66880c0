# sandbox-code-runner: a streamed run's exec, as root, before the run's own
# command (the relay, the turn or the wrapper: "$@", exec'd, so it keeps
# this shell's pid). The code's stdout and stderr still go to the exec's
# own streams, whole, and each is also copied, up to <cap> bytes, to
# <dir>/1 and <dir>/2, which the worker's follower execs read while the run
# goes on (follow.sh). <dir> is root's (umask 077); nothing the guest can
# name; the follower's last exec removes it. Anything that fails here only
# means the run is not streamed.
# Usage: sh -c "$TEE" sh <dir> <cap> <command…>
d=$1 cap=$2
shift 2
umask 077
if mkdir -p "$d" && mkfifo "$d/o" "$d/e" "$d/o.t" "$d/e.t"; then
  { dd bs=64k count="$cap" iflag=count_bytes of="$d/1" 2>/dev/null; exec cat >/dev/null; } <"$d/o.t" &
  { dd bs=64k count="$cap" iflag=count_bytes of="$d/2" 2>/dev/null; exec cat >/dev/null; } <"$d/e.t" &
  tee "$d/o.t" <"$d/o" &
  tee "$d/e.t" <"$d/e" >&2 &
  exec >"$d/o" 2>"$d/e"
fi
exec "$@"
