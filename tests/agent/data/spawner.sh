#!/bin/sh
# Starts two `sleep 300` of its own: one stays in the worker's process group
# (pid in $DDPRUN_TEST_OUT/child_<RANK>), one is daemonised out of it with
# setsid (pid in daemon_<RANK>). Then ends as $SPAWNER_END says: exit0,
# exit1 (once every local rank has started its processes), or wait (sleeps
# until it is stopped; its pid in pid_<RANK>).
out="$DDPRUN_TEST_OUT"
sleep 300 >/dev/null 2>&1 &
echo $! > "$out/child_$RANK.tmp" && mv "$out/child_$RANK.tmp" "$out/child_$RANK"
setsid sleep 300 >/dev/null 2>&1 &
echo $! > "$out/daemon_$RANK.tmp" && mv "$out/daemon_$RANK.tmp" "$out/daemon_$RANK"
case "$SPAWNER_END" in
  exit0) exit 0 ;;
  exit1)
    i=0
    while [ "$(ls "$out"/daemon_? 2>/dev/null | wc -l)" -lt "$LOCAL_WORLD_SIZE" ] &&
        [ $i -lt 200 ]; do
      sleep 0.05
      i=$((i + 1))
    done
    exit 1 ;;
esac
echo $$ > "$out/pid_$RANK.tmp" && mv "$out/pid_$RANK.tmp" "$out/pid_$RANK"
exec sleep 300
