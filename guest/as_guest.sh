# sandbox-code-runner: how a root shell runs part of an exec as the guest
# user (sourced first by turn.sh and by scope.sh). Guest code runs only as
# the image's user; the root half keeps what guest code must not touch
# (the verdict's key, root's directory) and hands the rest over.

# scr_ids <uid:gid>: $u and $g, the guest user to become (SCR_GUEST_USER
# overrides, as in the wrappers); false (and $why) for root or anything
# that is not <uid>:<gid>.
scr_ids() {
  spec=${SCR_GUEST_USER:-$1}
  u=${spec%%:*}
  g=${spec#*:}
  why="SCR_GUEST_USER=$spec is not <uid>:<gid>"
  case "$u:$g" in
    *:*:* | :* | *: | *[!0-9:]*) return 1 ;;
  esac
  why="SCR_GUEST_USER=$spec names root"
  [ "$u" -gt 0 ] && [ "$g" -gt 0 ]
}

# scr_as_guest: $as_guest, the command that runs what follows as $u:$g
# (empty where the user namespace maps one id only: there is no other
# user to become); false (and $why) without setpriv.
scr_as_guest() {
  rows=0
  one=
  while read -r _ _ n; do
    rows=$((rows + 1))
    one=$n
  done </proc/self/uid_map
  if [ "$rows" = 1 ] && [ "$one" = 1 ]; then
    as_guest=
    return 0
  fi
  why="setpriv (util-linux) is not in the image"
  command -v setpriv >/dev/null 2>&1 || return 1
  as_guest="setpriv --reuid=$u --regid=$g --clear-groups --"
}

# scr_hand_over <report>: the exec's streams (this shell's fds 0-2: pipes
# the daemon's agent made, root's and 0600) become the guest's, for a
# guest process to reopen through /proc (they carry only this exec, and
# die with it); and <report>, a fresh file in root's directory (no guest
# can put a link there), the guest's for its half to report in. One
# `chown` for all: this runs on every call's path.
scr_hand_over() {
  pipes=
  for f in 0 1 2; do
    [ -p "/proc/$$/fd/$f" ] && pipes="$pipes /proc/$$/fd/$f"
  done
  [ -e "$1" ] && rm -f "$1"
  (umask 077 && : >"$1") && chown "$u:$g" $pipes "$1"
}
