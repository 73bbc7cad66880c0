# sandbox-code-runner: one follower exec of a streamed run (tee.sh): waits
# until the copies of exec <gen> (<dir>/1, <dir>/2) hold more than the
# worker has (<seen1>, <seen2>), both streams ended (the two tees <dir>/gen
# names are gone), or <polls> polls of 20 ms pass, then prints what is
# new, at most <max> bytes of both together (stdout first): a line
# `<stream> <base64>` per stream that grew, and `end` once the streams had
# ended and it read all of them. Copies that are another exec's (<dir>/gen
# says otherwise) hold nothing for it. It leaves the copies where they
# are: the next streamed exec empties them.
# Usage: sh -c "$FOLLOW" sh <dir> <gen> <seen1> <seen2> <polls> <max>
d=$1 gen=$2 s1=$3 s2=$4 polls=$5 max=$6
# A tee that has ended: its process is gone, or a zombie not reaped yet.
ended() {
  st=
  read -r _ _ st _ 2>/dev/null <"/proc/$1/stat"
  [ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ]
}
grown() {
  if [ "$g" = "$gen" ] && sizes=$(stat -c %s "$d/1" "$d/2" 2>/dev/null); then set -- $sizes; else set -- 0 0; fi
  n1=$1 n2=$2
  [ "$n1" -gt "$s1" ] || [ "$n2" -gt "$s2" ]
}
i=0
# Whether the streams had ended is looked at before their sizes, so sizes
# read after it are final.
while :; do
  done=
  g= p1= p2=
  read -r g p1 p2 2>/dev/null <"$d/gen"
  [ "$g" = "$gen" ] && [ -n "$p2" ] && ended "$p1" && ended "$p2" && done=1
  grown || [ -n "$done" ] || [ "$i" -ge "$polls" ] || { i=$((i + 1)); sleep 0.02; continue; }
  break
done
r1=$((n1 - s1))
[ "$r1" -gt "$max" ] && r1=$max
[ "$r1" -lt 0 ] && r1=0
r2=$((n2 - s2))
[ "$r2" -gt $((max - r1)) ] && r2=$((max - r1))
[ "$r2" -lt 0 ] && r2=0
if [ "$r1" -gt 0 ]; then
  printf '1 '; tail -c +$((s1 + 1)) "$d/1" | head -c "$r1" | base64 -w0; echo
fi
if [ "$r2" -gt 0 ]; then
  printf '2 '; tail -c +$((s2 + 1)) "$d/2" | head -c "$r2" | base64 -w0; echo
fi
if [ -n "$done" ] && [ $((s1 + r1)) -ge "$n1" ] && [ $((s2 + r2)) -ge "$n2" ]; then
  echo end
fi
