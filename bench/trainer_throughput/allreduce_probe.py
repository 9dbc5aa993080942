"""The price of one gradient exchange on this machine: Gloo all-reduce of
each size given (MB of fp32) between the ranks of a ddprun job, nothing else
running in them. Rank 0 prints per size the mean of 50 back-to-back
all-reduces (after 5 warm-ups; what a stream of steps pays), their median
and the fastest one: far apart on a VM, where a wake-up of the other rank's
Gloo thread can wait for a busy virtual CPU. Run by run.sh with the sizes the trainers reported as
allreduce_mb_per_step, so their grad_allreduce_wait can be read against the
bare cost of the exchange."""
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    for mb in (float(a) for a in sys.argv[1:]):
        t = torch.ones(max(1, int(mb * 1e6 / 4)))
        for _ in range(5):
            dist.all_reduce(t)
        dist.barrier()
        times = []
        start = time.perf_counter()
        for _ in range(50):
            one = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - one)
        mean = (time.perf_counter() - start) / 50
        if dist.get_rank() == 0:
            print("%.2f MB: %.2f ms each in a stream; median %.2f, fastest "
                  "%.2f ms" % (mb, mean * 1e3,
                               statistics.median(times) * 1e3,
                               min(times) * 1e3), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
