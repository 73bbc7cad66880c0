# sandbox-code-runner: a streamed run's exec, as root, before the run's own
# command. It is put in front of the command's own `sh -c` script (the
# relay, the turn: `scr_tee <dir> <gen> <cap>` then the script, in the same
# shell, so it costs no shell of its own), or, for any other argv, in a
# shell that then execs it (`sh -c "$TEE"'scr_tee …; exec "$@"' sh <argv…>`).
# The code's stdout and stderr still reach the exec's own streams, whole
# (its answer is what it would be unstreamed), through one `tee` each,
# which also copies the first <cap> bytes of each stream to <dir>/1 and
# <dir>/2 (past <cap>, RLIMIT_FSIZE stops the copy and tee goes on with the
# exec's stream alone) for the worker's follower execs to read while the
# run goes on (follow.sh). <dir>/gen holds <gen>, this exec's name, and
# the two tees' pids: a tee ends once nothing writes its stream any more,
# and the daemon answers the exec only after both have (it reads the
# exec's streams to their end), so once the answer came the copies are
# whole.
#
# <dir> is root's (0700) and serves one exec at a time (a VM runs one
# streamed run at a time, and a run's execs one after another): its FIFOs
# are made once per VM, its copies are emptied here, so what the VM keeps
# between runs is at most the last run's copies. If the copy cannot be
# made, the run goes on as without streaming. Its names all begin with
# scr_t, clear of the script it goes before.
scr_tee_fifos() {
  [ -p "$scr_td/o" ] && [ -p "$scr_td/e" ] && [ -O "$scr_td" ] && return 0
  # The exec's umask stays the command's: /tmp/.scr, if this makes it, is
  # 0755 as every other maker leaves it; only <dir> is root's alone.
  (umask 022 && mkdir -p "${scr_td%/*}") || return 1
  [ -d "$scr_td" ] || mkdir -m 700 "$scr_td" || return 1
  [ -O "$scr_td" ] && rm -f "$scr_td/o" "$scr_td/e" && mkfifo -m 600 "$scr_td/o" "$scr_td/e"
}
scr_tee() {
  scr_td=$1
  scr_tgen=$2
  scr_tee_fifos || return 0
  # POSIX `ulimit -f` counts 512-byte blocks; it is set in each tee's own
  # subshell, never on the command. tee writes the exec's stream first; a
  # copy's write past the limit fails (EFBIG, the signal ignored) and tee
  # drops only that output. Each subshell execs its tee: one process per
  # stream. (The copies' modes do not matter: no one but root passes
  # <dir>.)
  scr_tblocks=$((($3 + 511) / 512))
  : >"$scr_td/1"
  : >"$scr_td/2"
  (ulimit -f "$scr_tblocks"; trap '' XFSZ; exec tee -a "$scr_td/1" <"$scr_td/o") </dev/null 2>/dev/null &
  scr_tp1=$!
  (ulimit -f "$scr_tblocks"; trap '' XFSZ; exec tee -a "$scr_td/2" <"$scr_td/e" >&3 3>&-) </dev/null 3>&2 >/dev/null 2>&1 &
  echo "$scr_tgen $scr_tp1 $!" >"$scr_td/gen"
  exec >"$scr_td/o" 2>"$scr_td/e"
}
