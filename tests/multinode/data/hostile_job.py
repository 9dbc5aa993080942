"""A Gloo training job on the agent store that hostile clients attack while
it runs (issue 39, tests/multinode/hostile_job_test.cc). Every rank trains
the same small linear model on its own seeded data for STEPS steps (gradients
all-reduced, one store round trip per step through the job's own store
connection), writes $MN_OUT/ready_<RANK> after its first step, and after the
last step waits (at most 300 s) for $MN_OUT/go, so the attacks overlap the
training and the job's store connections stay open until they are over. It
then reads every rank's key through that same connection and writes
$MN_OUT/result_<RANK>.json: the final parameters (exact, as hex floats), the
keys and TORCHELASTIC_RESTART_COUNT. Deterministic: the same on every run that finishes."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

STEPS = int(os.environ.get("HOSTILE_STEPS", "300"))
out = os.environ["MN_OUT"]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
store = c10d._get_default_store()
torch.manual_seed(1234 + rank)
x = torch.randn(64, 8)
y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(64)
torch.manual_seed(7)
w = torch.zeros(8, requires_grad=True)
for step in range(STEPS):
    loss = ((x @ w - y) ** 2).mean()
    (g,) = torch.autograd.grad(loss, [w])
    dist.all_reduce(g)
    with torch.no_grad():
        w -= 0.01 * g / world
    store.set("step_%d" % rank, str(step))
    if step == 0:
        open(os.path.join(out, "ready_%d" % rank), "w").close()
    time.sleep(0.02)
store.set("done_%d" % rank, "rank %d" % rank)
deadline = time.time() + 300
while not os.path.exists(os.path.join(out, "go")):
    if time.time() > deadline:
        sys.exit("no go file within 300 s")
    time.sleep(0.1)
try:
    keys = [store.get("done_%d" % r).decode() for r in range(world)]
except Exception as e:  # noqa: BLE001 - the test reads the message
    sys.exit("the store lost this job's keys or connection: %r" % (e,))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
path = os.path.join(out, "result_%d.json" % rank)
with open(path + ".tmp", "w") as f:
    json.dump({"rank": rank, "w": [v.hex() for v in w.tolist()],
               "keys": keys, "sum": t.item(),
               "restart_count": os.environ["TORCHELASTIC_RESTART_COUNT"]}, f)
os.rename(path + ".tmp", path)
dist.destroy_process_group()
