#!/bin/sh
# Rank 1 fails with exit code 3 on attempt 0; every other run succeeds.
echo "attempt $TORCHELASTIC_RESTART_COUNT rank $RANK"
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  echo "rank 1 failing" >&2
  exit 3
fi
exit 0
