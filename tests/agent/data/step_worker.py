"""Counts its steps with ddprun_steps (tests/agent/stack_multinode_*: the
straggler warning). Rank SLOW_RANK (env; -1 = none) pauses SLOW_S seconds
per step, the others FAST_S; each runs RUN_S seconds, then exits 0. No
torch: plain python3."""
import os
import time

import ddprun_steps

RANK = int(os.environ["RANK"])
SLOW = RANK == int(os.environ.get("SLOW_RANK", "-1"))
PAUSE = float(os.environ.get("SLOW_S" if SLOW else "FAST_S",
                             "0.2" if SLOW else "0.02"))
END = time.monotonic() + float(os.environ.get("RUN_S", "8"))

while time.monotonic() < END:
    ddprun_steps.step()
    time.sleep(PAUSE)
