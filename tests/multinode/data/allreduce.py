"""All-reduces (RANK + 1) over Gloo and writes what this rank saw to
$MN_OUT/allreduce_<RANK>.json."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
out = {
    "rank": int(os.environ["RANK"]),
    "dist_rank": dist.get_rank(),
    "world_size": int(os.environ["WORLD_SIZE"]),
    "group_rank": int(os.environ["GROUP_RANK"]),
    "restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
    "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"],
    "sum": t.item(),
}
path = os.path.join(os.environ["MN_OUT"], "allreduce_%d.json" % out["rank"])
with open(path + ".tmp", "w") as f:
    json.dump(out, f)
os.rename(path + ".tmp", path)
dist.destroy_process_group()
