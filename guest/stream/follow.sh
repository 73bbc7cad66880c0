# sandbox-code-runner: one follower exec of a streamed run (tee.sh): waits
# until <dir>/1 or <dir>/2 holds more than the worker has (<seen1>,
# <seen2>), or <polls> polls of 20 ms pass, then prints what is new of
# each, at most <max> bytes: a line `<stream> <base64>` per stream that
# grew. With <polls> 0 it waits for nothing; with `end` after it, it
# removes <dir> once it has read all of it.
# Usage: sh -c "$FOLLOW" sh <dir> <seen1> <seen2> <polls> <max> [end]
d=$1 s1=$2 s2=$3 polls=$4 max=$5 end=${6:-}
grown() {
  if sizes=$(stat -c %s "$d/1" "$d/2" 2>/dev/null); then set -- $sizes; else set -- 0 0; fi
  n1=$1 n2=$2
  [ "$n1" -gt "$s1" ] || [ "$n2" -gt "$s2" ]
}
i=0
while ! grown && [ "$i" -lt "$polls" ]; do
  i=$((i + 1))
  sleep 0.02
done
if [ "$n1" -gt "$s1" ]; then
  printf '1 '; tail -c +$((s1 + 1)) "$d/1" | head -c "$max" | base64 -w0; echo
fi
if [ "$n2" -gt "$s2" ]; then
  printf '2 '; tail -c +$((s2 + 1)) "$d/2" | head -c "$max" | base64 -w0; echo
fi
if [ "$end" = end ] && [ $((n1 - s1)) -le "$max" ] && [ $((n2 - s2)) -le "$max" ]; then
  rm -rf "$d"
fi
