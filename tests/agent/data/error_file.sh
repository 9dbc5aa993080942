#!/bin/sh
# Rank 1 writes a torchrun-schema error file and exits 5; the others sleep
# until the agent stops them.
if [ "$RANK" = 1 ]; then
  printf '%s' '{"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: bad batch", "timestamp": "1700000000"}}}' > "$TORCHELASTIC_ERROR_FILE"
  exit 5
fi
exec sleep 30
