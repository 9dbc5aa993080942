"""A Gloo job on the agent store whose store must outlive hostile
rendezvous requests (issue 39): once the group formed, each rank sets
probe_<RANK> through the job's store (the one connection its process group
uses), writes $MN_OUT/ready_<RANK> and waits (at most 120 s) for $MN_OUT/go
while the test sends its requests; then it reads every rank's probe key
through that same connection, all-reduces (RANK + 1), and writes
$MN_OUT/probe_<RANK>.json. A store that was emptied, or a connection that
was closed, fails the read: the worker exits 1."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

out = os.environ["MN_OUT"]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
store = c10d._get_default_store()
store.set("probe_%d" % rank, "from rank %d" % rank)
open(os.path.join(out, "ready_%d" % rank), "w").close()
deadline = time.time() + 120
while not os.path.exists(os.path.join(out, "go")):
    if time.time() > deadline:
        sys.exit("no go file within 120 s")
    time.sleep(0.1)
try:
    values = [store.get("probe_%d" % r).decode() for r in range(world)]
except Exception as e:  # noqa: BLE001 - the test reads the message
    sys.exit("the store lost this job's keys or connection: %r" % (e,))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
path = os.path.join(out, "probe_%d.json" % rank)
with open(path + ".tmp", "w") as f:
    json.dump({"rank": rank, "values": values, "sum": t.item()}, f)
os.rename(path + ".tmp", path)
dist.destroy_process_group()
