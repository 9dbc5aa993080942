"""A PyTorch training script that survives the loss of a rank under
`ddprun --restart_scope failed`, with Gloo and ddprun_elastic (shipped beside
ddprun: <ddprun's dir>/../lib/ddprun/python, on the workers' PYTHONPATH).

    ddprun --standalone --nproc_per_node=4 --restart_scope failed \\
        examples/python/elastic_gloo.py --steps 40 --out /tmp/elastic

A small MLP with dropout learns a fixed regression on a batch per rank per
step, with DDP and SGD with momentum. When a rank dies, the others re-form,
the replacement takes the model, the optimizer's momentum and the step from
a live peer, and the interrupted step is done again: every rank writes
<out>/params.<rank>.pt at the end, equal to the uninterrupted run's. Each
committed step is counted for ddprun (ddprun_steps). With --plain the same
training runs without ddprun_elastic (init_process_group and DDP only), as a
script that knows nothing of restart scopes: under "failed" its survivors
fail their next collective and exit non-zero.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

try:
    import ddprun_steps
except ImportError:  # not launched by ddprun
    ddprun_steps = None


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(32, 1))


def batch(step, rank, world):
    # The same data whatever process computes this rank's share of a step.
    g = torch.Generator().manual_seed(step * world + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def count_step():
    if ddprun_steps is not None:
        ddprun_steps.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", required=True)
    parser.add_argument("--exchange", type=int, default=0,
                        help="also all-reduce this many floats each step "
                        "(more than one Gloo ring chunk: a survivor then "
                        "waits on another survivor, not on the dead rank)")
    parser.add_argument("--plain", action="store_true",
                        help="no ddprun_elastic: init_process_group and DDP")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1234)  # the same initial model on every rank
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    if args.plain:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        for step in range(1, args.steps + 1):
            torch.manual_seed(step * world + rank)
            optimizer.zero_grad()
            x, y = batch(step, rank, world)
            F.mse_loss(ddp(x), y).backward()
            optimizer.step()
            count_step()
        save(model, args.out, rank, args.steps)
        return 0

    import ddprun_elastic
    elastic = ddprun_elastic.Elastic(backend="gloo")
    rank, world = elastic.rank, elastic.world_size
    progress = {"step": 0, "loss_sum": 0.0}
    elastic.track("model", model)
    elastic.track("optimizer", optimizer)
    elastic.track("progress", progress)
    elastic.start()  # a replacement takes its state from a live peer here
    while progress["step"] < args.steps:
        step = progress["step"] + 1

        def compute():
            x, y = batch(step, rank, world)
            loss = F.mse_loss(elastic.ddp(model)(x), y)
            loss.backward()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if args.exchange:
                dist.all_reduce(torch.ones(args.exchange))
            return float(mean) / world

        def apply(loss):
            optimizer.step()
            progress["step"] = step
            progress["loss_sum"] += loss
            count_step()

        elastic.run_step(step, compute, apply)
    save(model, args.out, rank, progress["step"],
         progress["loss_sum"] / max(1, progress["step"]), elastic.notices)
    elastic.close()
    return 0


def save(model, out, rank, steps, mean_loss=None, notices=0):
    os.makedirs(out, exist_ok=True)
    torch.save({"params": [p.detach().clone() for p in model.parameters()],
                "steps": steps, "mean_loss": mean_loss, "notices": notices},
               os.path.join(out, "params.%d.pt" % rank))
    print("rank %d done step %d" % (rank, steps))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
