"""A real torch.distributed program, unchanged from what users run under
torchrun: env:// init with Gloo, an all-reduce, one DistributedDataParallel
step. Each rank writes <out>/ddp_<rank>.json with what it observed; the driver
asserts on those files. Takes `--local_rank N` as DeepSpeed scripts do (the
deepspeed launcher and torch.distributed.launch pass it; torchrun does not).

Ranks start from different random weights and see different data, so equal
parameters after the step prove that DDP broadcast rank 0's weights and
averaged the gradients; rank 0 also recomputes the step in one process and
records whether DDP matches it.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def make_batch(rank):
    g = torch.Generator().manual_seed(200 + rank)
    return torch.randn(8, 4, generator=g)


def reference_step(world):
    torch.manual_seed(100)  # rank 0's initial weights
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    for r in range(world):
        (model(make_batch(r)).pow(2).sum() / world).backward()
    opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None)
    args = parser.parse_args()
    out_dir = args.out_dir
    dist.init_process_group("gloo")  # init_method env:// is the default
    rank, world = dist.get_rank(), dist.get_world_size()

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)

    torch.manual_seed(100 + rank)  # deliberately different per rank
    model = torch.nn.Linear(4, 2)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    opt.zero_grad()
    ddp(make_batch(rank)).pow(2).sum().backward()
    opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])

    gathered = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    result = {
        "rank": rank,
        "world": world,
        "env_rank": int(os.environ["RANK"]),
        "env_local_rank": int(os.environ["LOCAL_RANK"]),
        "arg_local_rank": args.local_rank,
        "allreduce": t.item(),
        "params": params.tolist(),
        "params_equal_across_ranks": all(
            torch.equal(g, gathered[0]) for g in gathered),
        "matches_single_process_reference": bool(
            torch.allclose(params, reference_step(world), atol=1e-6)),
    }
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, "ddp_%d.json" % rank), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
