"""A Gloo job on the agent store: init through env:// (default) or, with
STORE_INIT=tcp, through tcp://MASTER_ADDR:MASTER_PORT as --dist-url scripts
do; all-reduces (RANK + 1) and writes $MN_OUT/store_<RANK>.json. With
STORE_FAIL_RANK=R, rank R exits 3 on attempt 0 after the group formed (its
keys are in the store), so the job restarts. With STORE_HOLD=1 every rank
of the first round writes $MN_OUT/held_<RANK> after the group formed and
waits to be killed (the test replaces a node: a round with the same restart
count, so the same key prefix)."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
kwargs = {"timeout": datetime.timedelta(seconds=60)}
if os.environ.get("STORE_INIT") == "tcp":
    kwargs.update(init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"],
                                               os.environ["MASTER_PORT"]),
                  rank=rank, world_size=world)
dist.init_process_group("gloo", **kwargs)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
if rank == int(os.environ.get("STORE_FAIL_RANK", "-1")) and attempt == 0:
    sys.exit(3)
held = os.path.join(os.environ["MN_OUT"], "held_%d" % rank)
if os.environ.get("STORE_HOLD") == "1" and not os.path.exists(held):
    open(held, "w").close()
    time.sleep(600)
dist.barrier()
out = {
    "rank": rank,
    "world_size": world,
    "restart_count": attempt,
    "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"],
    "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
    "sum": t.item(),
}
path = os.path.join(os.environ["MN_OUT"], "store_%d.json" % rank)
with open(path + ".tmp", "w") as f:
    json.dump(out, f)
os.rename(path + ".tmp", path)
dist.destroy_process_group()
