"""torch's bin/test_script_init_method.py, rewritten: init_process_group
(gloo) with the given --init-method, then an all_reduce of one-hot vectors
must sum to WORLD_SIZE."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init-method", "--init_method", required=True)
args = parser.parse_args()
world = int(os.environ["WORLD_SIZE"])
rank = int(os.environ["RANK"])
url = args.init_method
# Debian's torch 2.6 is built without libuv, and the stores that tcp:// and
# env:// create ask for it: as a client of torchrun 2.6's agent store
# whatever the URL or USE_LIBUV says. USE_LIBUV=0 (the harness's way to say
# so) makes them retry without (tests/compat/torchrun_fixes.py); torch 1.13
# has no libuv and nothing to fix.
if os.environ.get("USE_LIBUV") == "0":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", "..", "compat"))
    import torchrun_fixes
    torchrun_fixes.fix_worker_store()
dist.init_process_group("gloo", init_method=url, world_size=world,
                        rank=rank)
t = torch.zeros(world)
t[rank] = 1
dist.all_reduce(t)
if int(t.sum().item()) != world:
    raise SystemExit("all_reduce gave %r" % t.tolist())
dist.destroy_process_group()
print("Done")
