"""How evenly this machine's cores run when both are busy: a 3D convolution
(one intra-op thread, the trainers' kind of work) for SECONDS on each core
alone, then on every core at once, several rounds. Prints each core's speed
in the concurrent runs relative to the same core alone.

Why run.sh prints it: two processes that never talk (the ceiling) add up
whatever each core gives, but synchronous data parallelism steps at the pace
of the slowest rank. On a VM whose virtual CPUs share the host with others,
one core can run at 60-70% for seconds while the other does not; the 2-rank
run then waits for it at every all-reduce (grad_allreduce_wait) and falls
short of the ceiling by about that much, whatever the exchange costs.
Needs Debian's python3-torch; run.sh skips it without."""
import os
import sys
import time

import torch


def rate(seconds):
    torch.set_num_threads(1)
    conv = torch.nn.Conv3d(16, 16, 3, padding=1)
    x = torch.randn(2, 16, 16, 16, 16)
    with torch.no_grad():
        for _ in range(3):
            conv(x)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            conv(x)
            n += 1
    return n / (time.perf_counter() - start)


def run_on(cpus, seconds):
    """Rates of one process pinned to each cpu in `cpus`, all at once."""
    pipes = []
    for cpu in cpus:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.sched_setaffinity(0, {cpu})
            os.write(w, repr(rate(seconds)).encode())
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
    rates = []
    for pid, r in pipes:
        with os.fdopen(r) as f:
            rates.append(float(f.read()))
        os.waitpid(pid, 0)
    return rates


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("one core: nothing to compare")
        return
    lines = []
    for k in range(rounds):
        alone = [run_on([c], seconds)[0] for c in cpus]
        both = run_on(cpus, seconds)
        lines.append("round %d: " % (k + 1) + ", ".join(
            "cpu%d %.0f%%" % (c, 100 * b / a)
            for c, a, b in zip(cpus, alone, both)))
    print("each core's conv3d speed with every core busy, against the same "
          "core alone (%g s each):" % seconds)
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
