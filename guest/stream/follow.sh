# sandbox-code-runner: one follower exec of a streamed run (tee.sh): waits
# until <dir>/1 or <dir>/2 holds more than the worker has (<seen1>,
# <seen2>), both streams ended (tee.sh's 1.end and 2.end: the run's exec
# is done), or <polls> polls of 20 ms pass, then prints what is new, at
# most <max> bytes of both together (stdout first): a line
# `<stream> <base64>` per stream that grew. With <polls> 0 it waits for
# nothing; with `end` after it, it removes <dir> once it has read all.
# Once the streams had ended and it read all, it removes <dir> and says
# `end`: nothing is left for another follower.
# Usage: sh -c "$FOLLOW" sh <dir> <seen1> <seen2> <polls> <max> [end]
d=$1 s1=$2 s2=$3 polls=$4 max=$5 end=${6:-}
grown() {
  if sizes=$(stat -c %s "$d/1" "$d/2" 2>/dev/null); then set -- $sizes; else set -- 0 0; fi
  n1=$1 n2=$2
  [ "$n1" -gt "$s1" ] || [ "$n2" -gt "$s2" ]
}
i=0
ended() { [ -e "$d/1.end" ] && [ -e "$d/2.end" ]; }
# Whether the streams had ended is looked at before their sizes, so sizes
# read after it are final.
while :; do
  done=
  ended && done=1
  grown || [ -n "$done" ] || [ "$i" -ge "$polls" ] || { i=$((i + 1)); sleep 0.02; continue; }
  break
done
r1=$((n1 - s1))
[ "$r1" -gt "$max" ] && r1=$max
r2=$((n2 - s2))
[ "$r2" -gt $((max - r1)) ] && r2=$((max - r1))
if [ "$r1" -gt 0 ]; then
  printf '1 '; tail -c +$((s1 + 1)) "$d/1" | head -c "$r1" | base64 -w0; echo
fi
if [ "$r2" -gt 0 ]; then
  printf '2 '; tail -c +$((s2 + 1)) "$d/2" | head -c "$r2" | base64 -w0; echo
fi
if { [ "$end" = end ] || [ -n "$done" ]; } && [ $((s1 + r1)) -ge "$n1" ] && [ $((s2 + r2)) -ge "$n2" ]; then
  rm -rf "$d"
  [ -n "$done" ] && echo end
fi
