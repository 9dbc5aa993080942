"""Records this worker's argv and environment as JSON in
$CONFORMANCE_OUT/rank_<RANK or 'x'>_<pid>.json (DeepSpeed's and accelerate's
cases: what their launchers hand the script). Imports nothing from torch."""
import json
import os
import sys

out = os.environ["CONFORMANCE_OUT"]
rank = os.environ.get("RANK", "x")
path = os.path.join(out, "rank_%s_%d.json" % (rank, os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
os.rename(path + ".tmp", path)
if any(a.startswith("--prompt") for a in sys.argv[1:]):
    # DeepSpeed's test_user_args script: the user's quoting must survive.
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=str)
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--world_size", type=int, default=1)
    parser.parse_args()
print("ARG PARSE SUCCESS")
