#!/bin/sh
# Starts two `sleep 300` of its own: one stays in the worker's process group
# (pid in $DDPRUN_TEST_OUT/child_<RANK>), one is daemonised out of it with
# setsid (pid in daemon_<RANK>, written once it is out). Then ends as
# $SPAWNER_END says: exit0, exit1 (once every local rank has started its
# processes), or wait (sleeps until it is stopped; its pid in pid_<RANK>).
out="$DDPRUN_TEST_OUT"
sleep 300 >/dev/null 2>&1 &
echo $! > "$out/child_$RANK.tmp" && mv "$out/child_$RANK.tmp" "$out/child_$RANK"
# The daemon records its pid itself, once setsid has taken it out of this
# process group, and this worker waits for that: a pid written by the
# parent right after the fork could name a process still in the group when
# the job ends (under load, the daemon then died with the job).
setsid sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 300' \
  spawner-daemon "$out/daemon_$RANK" >/dev/null 2>&1 &
i=0
while [ ! -f "$out/daemon_$RANK" ] && [ $i -lt 200 ]; do
  sleep 0.05
  i=$((i + 1))
done
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
