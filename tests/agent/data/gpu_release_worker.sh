#!/bin/sh
# Attempt 0 fails leaving 900 MiB on GPU 0 of the fake nvidia-smi
# (fake_smi/nvidia-smi), which the "driver" frees after 3 more queries;
# the restart succeeds.
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  echo 900 > "$FAKE_SMI_DIR/used"
  echo 3 > "$FAKE_SMI_DIR/release_after"
  exit 1
fi
echo "attempt $TORCHELASTIC_RESTART_COUNT ran"
