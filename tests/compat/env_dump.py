"""Worker for the side-by-side tests: records its environment and argv.

Writes <COMPAT_OUT>/env_<attempt>_<RANK>_<pid>.json (attempt =
TORCHELASTIC_RESTART_COUNT) and exits 0. With --fail-first-attempt, rank 0 of
attempt 0 waits (at most 30 s) until every local rank of the attempt has
written its file, then exits 1 so that the launcher restarts the group.
Imports nothing from torch so that it starts in milliseconds under either
launcher.
"""
import glob
import json
import os
import sys
import time

out_dir = os.environ["COMPAT_OUT"]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "x")
rank = os.environ.get("RANK", "x")
path = os.path.join(out_dir, "env_%s_%s_%d.json" % (attempt, rank,
                                                   os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv[1:]}, f)
os.rename(path + ".tmp", path)

if "--fail-first-attempt" in sys.argv[1:] and attempt == "0" and rank == "0":
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    deadline = time.monotonic() + 30
    while (len(glob.glob(os.path.join(out_dir, "env_0_*.json"))) < local_world
           and time.monotonic() < deadline):
        time.sleep(0.01)
    sys.exit(1)
