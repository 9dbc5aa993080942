#!/bin/sh
# A worker whose stacks file exists (as when a Python child of a shell
# wrapper opened it) but which has no handler for the dump signal: creates
# $DDPRUN_STACKS_FILE, then becomes sleeper.sh (pid file, `sleep 60`).
: >> "$DDPRUN_STACKS_FILE"
exec "$(dirname "$0")/sleeper.sh"
