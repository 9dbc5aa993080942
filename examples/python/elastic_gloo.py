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

For a launcher that restarts every worker (torchrun, ddprun --restart_scope
group), --plain --checkpoint_every N makes rank 0 save the model, the
optimizer and the step every N steps (<out>/checkpoints/ckpt.pt, written to a
temporary file and renamed over it), and every rank resume from it when it
starts: a failure then costs a restart and the steps since that checkpoint,
and the resumed run ends with the uninterrupted run's parameters. --width,
--layers and --batch size the model and the batch (real compute per step);
--record writes <out>/steps.<rank>.log (each committed step's number, a line
per step: a step done again shows twice) and <out>/params.<rank>.sha256 (the
final parameters' bytes), for bench/recovery/run.py --trainer python.
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

try:
    import ddprun_steps
except ImportError:  # not launched by ddprun
    ddprun_steps = None


def make_model(width=32, layers=0):
    hidden = []
    for _ in range(layers):
        hidden += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(
        torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        *hidden, torch.nn.Linear(width, 1))


def batch(step, rank, world, size=16):
    # The same data whatever process computes this rank's share of a step.
    g = torch.Generator().manual_seed(step * world + rank)
    x = torch.randn(size, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


class Steps:
    """Counts each committed step for ddprun (ddprun_steps) and, with
    --record, appends its number to <out>/steps.<rank>.log."""

    def __init__(self, args, rank):
        self.log = None
        if args.record:
            os.makedirs(args.out, exist_ok=True)
            self.log = open(os.path.join(args.out, "steps.%d.log" % rank), "a")

    def count(self, step):
        if ddprun_steps is not None:
            ddprun_steps.step()
        if self.log is not None:
            self.log.write("%d\n" % step)
            self.log.flush()


def checkpoint_path(args):
    return os.path.join(args.out, "checkpoints", "ckpt.pt")


def resume(args, model, optimizer):
    """The step of the newest checkpoint, loaded into model and optimizer (0
    without one)."""
    path = checkpoint_path(args)
    if not args.checkpoint_every or not os.path.exists(path):
        return 0
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    print("resumed from checkpoint at step %d" % state["step"])
    sys.stdout.flush()
    return state["step"]


def save_checkpoint(args, model, optimizer, step):
    path = checkpoint_path(args)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    torch.save({"model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)  # a reader sees the old checkpoint or the new one


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
    parser.add_argument("--checkpoint_every", type=int, default=0,
                        help="with --plain: rank 0 saves a checkpoint every "
                        "N steps and every rank resumes from it (0: none)")
    parser.add_argument("--width", type=int, default=32,
                        help="the hidden layers' width")
    parser.add_argument("--layers", type=int, default=0,
                        help="hidden width x width layers beyond the first")
    parser.add_argument("--batch", type=int, default=16,
                        help="samples per rank per step")
    parser.add_argument("--record", action="store_true",
                        help="write steps.<rank>.log and params.<rank>.sha256 "
                        "under --out")
    args = parser.parse_args()
    for name in ("steps", "width", "batch"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % name)
    if args.layers < 0 or args.checkpoint_every < 0:
        parser.error("--layers and --checkpoint_every must not be negative")
    if args.checkpoint_every and not args.plain:
        parser.error("--checkpoint_every is for --plain (ddprun_elastic heals "
                     "from a live peer instead)")
    torch.set_num_threads(1)
    torch.manual_seed(1234)  # the same initial model on every rank
    model = make_model(args.width, args.layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    if args.plain:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        steps = Steps(args, rank)
        done = resume(args, model, optimizer)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if done:
            # A DDP built anew sums its first step's gradients in buckets
            # laid out in parameter order, then lays them out in the order
            # they became ready; the uninterrupted run's step done + 1 used
            # that second layout. Over Gloo's ring a gradient's place in
            # its bucket decides how its sum rounds: one step whose
            # gradients are dropped gives the resumed run that layout, and
            # the uninterrupted run's parameters bit for bit.
            x, y = batch(done, rank, world, args.batch)
            F.mse_loss(ddp(x), y).backward()
            optimizer.zero_grad()
        for step in range(done + 1, args.steps + 1):
            torch.manual_seed(step * world + rank)
            optimizer.zero_grad()
            x, y = batch(step, rank, world, args.batch)
            F.mse_loss(ddp(x), y).backward()
            optimizer.step()
            steps.count(step)
            if (rank == 0 and args.checkpoint_every and
                    step % args.checkpoint_every == 0 and step < args.steps):
                save_checkpoint(args, model, optimizer, step)
        save(model, args, rank, args.steps)
        return 0

    import ddprun_elastic
    elastic = ddprun_elastic.Elastic(backend="gloo")
    rank, world = elastic.rank, elastic.world_size
    steps = Steps(args, rank)
    progress = {"step": 0, "loss_sum": 0.0}
    elastic.track("model", model)
    elastic.track("optimizer", optimizer)
    elastic.track("progress", progress)
    elastic.start()  # a replacement takes its state from a live peer here
    while progress["step"] < args.steps:
        step = progress["step"] + 1

        def compute():
            x, y = batch(step, rank, world, args.batch)
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
            steps.count(step)

        elastic.run_step(step, compute, apply)
    save(model, args, rank, progress["step"],
         progress["loss_sum"] / max(1, progress["step"]), elastic.notices)
    elastic.close()
    return 0


def save(model, args, rank, steps, mean_loss=None, notices=0):
    out = args.out
    os.makedirs(out, exist_ok=True)
    params = [p.detach().clone() for p in model.parameters()]
    torch.save({"params": params,
                "steps": steps, "mean_loss": mean_loss, "notices": notices},
               os.path.join(out, "params.%d.pt" % rank))
    if args.record:
        digest = hashlib.sha256()
        for p in params:
            digest.update(p.contiguous().numpy().tobytes())
        with open(os.path.join(out, "params.%d.sha256" % rank), "w") as f:
            f.write(digest.hexdigest() + "\n")
    print("rank %d done step %d" % (rank, steps))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
