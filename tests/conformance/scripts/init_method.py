"""torch's bin/test_script_init_method.py, rewritten: init_process_group
(gloo) with the given --init-method, then an all_reduce of one-hot vectors
must sum to WORLD_SIZE."""
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init-method", "--init_method", required=True)
args = parser.parse_args()
world = int(os.environ["WORLD_SIZE"])
rank = int(os.environ["RANK"])
url = args.init_method
# Debian's torch 2.6 is built without libuv, and a store that tcp:// or
# env:// creates asks for it unless the URL says otherwise (USE_LIBUV=0 is
# the harness's way to say so; torch 1.13 ignores the parameter).
if os.environ.get("USE_LIBUV") == "0" and "use_libuv" not in url:
    url += ("&" if "?" in url else "?") + "use_libuv=0"
dist.init_process_group("gloo", init_method=url, world_size=world,
                        rank=rank)
t = torch.zeros(world)
t[rank] = 1
dist.all_reduce(t)
if int(t.sum().item()) != world:
    raise SystemExit("all_reduce gave %r" % t.tolist())
dist.destroy_process_group()
print("Done")
