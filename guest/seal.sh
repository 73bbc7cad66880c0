# sandbox-code-runner: the image seal. Root runs it on a VM's execs, as
#   sh -c "<this script>" scr-seal <command> [args...]
# in place of <command>, until one of them has sealed the VM. It makes every
# mount the VM does not own read-only, then execs <command> (same pid, same
# stdin, stdout and stderr, same exit).
#
# Why: the daemon boots every VM of an image from one shared rootfs and
# mounts no overlay over it (/usr, /etc, /home, /var... are bind mounts of
# that one copy). The image's user owns its home there, and /var/tmp is
# world-writable: a file guest code left there would be seen by the next
# tenant's VM. Sealed, the VM can write only what is its own.
#
# What stays writable is decided here and nowhere else, by mount point: the
# VM's private tmpfs root (new top-level directories, root's only) and its
# /tmp, /run, /dev, /proc and /sys, with whatever is mounted below them.
# Every other mount (the image's directories, a share from the host, one
# nobody has named yet) becomes read-only. A mount that stays writable
# stops the exec, exit 125, before <command> starts.

scr_own() {
    case $1 in
    / | /tmp | /tmp/* | /run | /run/* | /dev | /dev/* | /proc | /proc/* | /sys | /sys/*) return 0 ;;
    esac
    return 1
}

# Sets scr_open to the mount points, not the VM's own, still writable:
# mounted rw, and (where a mount covers another at the same point) the one
# on top is (`test -w` asks the kernel, which refuses even root on a
# read-only mount). With "close", first tries to make each read-only,
# keeping its other flags (a mount locked nosuid must be remounted nosuid).
scr_scan() {
    scr_open=
    while read -r _ _ _ _ scr_mp scr_opts _; do
        case $scr_mp in *\\*) scr_mp=$(printf '%b' "$scr_mp") ;; esac
        case ,$scr_opts, in *,ro,*) continue ;; esac
        scr_own "$scr_mp" && continue
        [ -w "$scr_mp" ] || continue
        if [ "$1" = close ]; then
            mount -o "remount,bind,ro${scr_opts#rw}" "$scr_mp" 2>/dev/null && continue
            mount -o remount,bind,ro "$scr_mp" 2>/dev/null && continue
        fi
        scr_open="$scr_open $scr_mp"
    done </proc/self/mountinfo
}

# Rounds, not one pass: a mount that appears meanwhile is closed by the next.
scr_round=0
scr_scan check
while [ -n "$scr_open" ]; do
    scr_round=$((scr_round + 1))
    if [ "$scr_round" -gt 3 ]; then
        printf 'sandbox-code-runner: cannot make the image read-only at%s; no code ran\n' "$scr_open" >&2
        exit 125
    fi
    scr_scan close
    scr_scan check
done
exec "$@"
