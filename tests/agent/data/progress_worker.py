"""--max_restarts_without_progress: the first attempt trains 5 steps (counted
with ddprun_steps) and then fails; every restart fails before its first
step, as a job with a corrupt checkpoint would. Plain python3, no torch."""
import os
import sys

import ddprun_steps

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0:
    for _ in range(5):
        ddprun_steps.step()
sys.exit("attempt %d: cannot load the checkpoint" % attempt)
