#!/bin/sh
# Appends "attempt <TORCHELASTIC_RESTART_COUNT>" to $DDPRUN_TEST_OUT/starts
# and exits with the code for this attempt from $EXIT_CODES (comma
# separated, by attempt; the last one repeats).
echo "attempt $TORCHELASTIC_RESTART_COUNT" >> "$DDPRUN_TEST_OUT/starts"
code=$(echo "$EXIT_CODES" | awk -F, -v a="$TORCHELASTIC_RESTART_COUNT" \
  '{ i = a + 1; if (i > NF) i = NF; print $i }')
echo "usage: train.py [-h] --csv_path PATH (exit $code)" >&2
exit "$code"
