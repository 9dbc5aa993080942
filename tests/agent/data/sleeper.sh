#!/bin/sh
# Records its pid in $DDPRUN_TEST_OUT/pid_<RANK> and sleeps (exec keeps the
# pid), so tests can check through /proc that the worker is gone.
echo $$ > "$DDPRUN_TEST_OUT/pid_$RANK.tmp" && mv "$DDPRUN_TEST_OUT/pid_$RANK.tmp" "$DDPRUN_TEST_OUT/pid_$RANK"
exec sleep 60
