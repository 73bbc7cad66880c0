# sandbox-code-runner: a streamed run's exec, as root, before the run's own
# command (the relay, the turn or the wrapper: "$@", exec'd, so it keeps
# this shell's pid). The code's stdout and stderr go, instead of to the
# exec's own streams, to <dir>/1 and <dir>/2, the first <cap> bytes of each
# (the rest is read and dropped, so the code never blocks), which the
# worker's follower execs read while the run goes on (follow.sh), and
# <dir>/1.end and 2.end once nothing writes the stream any more; the
# worker gives the exec's answer what they read. <dir> is root's (0700),
# a fresh one per exec; the follower's last exec removes it. If the
# copy cannot be made, the run goes on as without streaming (its output in
# the exec's own streams).
# Usage: sh -c "$TEE" sh <dir> <cap> <command…>
d=$1 cap=$2
shift 2
# The exec's umask stays the command's: /tmp/.scr, if this makes it, is
# 0755 as every other maker leaves it; only the copy is root's alone.
if (umask 022 && mkdir -p "${d%/*}") && mkdir -m 700 "$d" && mkfifo -m 600 "$d/o" "$d/e"; then
  { umask 077; dd bs=64k count="$cap" iflag=count_bytes of="$d/1" 2>/dev/null; cat >/dev/null; : >"$d/1.end"; } <"$d/o" &
  { umask 077; dd bs=64k count="$cap" iflag=count_bytes of="$d/2" 2>/dev/null; cat >/dev/null; : >"$d/2.end"; } <"$d/e" &
  exec >"$d/o" 2>"$d/e"
fi
exec "$@"
