#!/bin/sh
# Records one line per start in $MN_OUT/start_<node>_<rc>_<ws>_<rank>_<pid>:
#   node rank world_size group_rank group_world_size restart_count pid time
#   master_addr
# then: exits 0 at once when WORLD_SIZE is $MN_FINISH_WS; exits
# ${MN_FAIL_CODE:-3} when MN_FAIL=always, or MN_FAIL=first on group rank 1 in
# attempt 0; otherwise sleeps ${MN_SLEEP:-60} s and exits 0.
f="$MN_OUT/start_${MN_NODE}_${TORCHELASTIC_RESTART_COUNT}_${WORLD_SIZE}_${RANK}_$$"
echo "$MN_NODE $RANK $WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE" \
  "$TORCHELASTIC_RESTART_COUNT $$ $(date +%s.%N) $MASTER_ADDR" > "$f.tmp"
mv "$f.tmp" "$f"
if [ "$WORLD_SIZE" = "${MN_FINISH_WS:-none}" ]; then exit 0; fi
case "${MN_FAIL:-}" in
  always) sleep 0.3; exit "${MN_FAIL_CODE:-3}" ;;
  first)
    if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$GROUP_RANK" = 1 ]; then
      sleep 0.3; exit "${MN_FAIL_CODE:-3}"
    fi ;;
esac
exec sleep "${MN_SLEEP:-60}"
