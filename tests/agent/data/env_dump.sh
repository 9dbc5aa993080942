#!/bin/sh
# Writes the worker's environment to $DDPRUN_TEST_OUT/env_<RANK> and says
# hello on stdout and stderr (used by the ddprun process tests).
env > "$DDPRUN_TEST_OUT/env_$RANK.tmp" && mv "$DDPRUN_TEST_OUT/env_$RANK.tmp" "$DDPRUN_TEST_OUT/env_$RANK"
echo "args:$*" > "$DDPRUN_TEST_OUT/args_$LOCAL_RANK"
echo "hello from $RANK"
echo "warning from $RANK" >&2
