#!/usr/bin/env python3
"""DDP step benchmark: our C++ DDP (ddprun worker runtime) vs Python's
torch.nn.parallel.DistributedDataParallel, same conv model, Gloo, 2 ranks on
loopback, run back to back in one invocation. Prints median step times, the
communication overhead (step with sync minus step under no_sync) and the
ratio C++/Python (goal <= 1.0).

  bench/ddp_step/run_bench.py --bin BUILD/bin [--world 2] [--steps 40]
      [--warmup 5] [--batch 32] [--threads 1] [--rounds 2]

Python runs with PYTHON_EXEC (default /usr/bin/python3, Debian's torch)."""
import argparse
import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmd, world, threads):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS=str(threads))
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    out = None
    for r, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            sys.exit(f"rank {r} of {cmd[0]} failed ({p.returncode}):\n{stderr}")
        for line in stdout.splitlines():
            if line.startswith("{"):
                out = json.loads(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder with ddp_step_bench")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternate C++/Python this many times, keep the best")
    a = ap.parse_args()
    python = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
    args = [str(a.warmup), str(a.steps), str(a.batch)]
    cpp_cmd = [os.path.join(a.bin, "ddp_step_bench")] + args
    py_cmd = [python, os.path.join(HERE, "ddp_step.py")] + args
    best = {}
    for _ in range(a.rounds):
        for name, cmd in (("cpp", cpp_cmd), ("python", py_cmd)):
            r = run_ranks(cmd, a.world, a.threads)
            if name not in best:
                best[name] = r
            else:  # best of each metric over the rounds
                for k, v in r.items():
                    if k.endswith("_ms"):
                        best[name][k] = min(best[name][k], v)
    c, p = best["cpp"], best["python"]
    print(f"DDP step, conv net, batch {a.batch}/rank, {a.world} ranks, Gloo, "
          f"{a.threads} thread(s)/rank, median of {a.steps} steps, best of "
          f"{a.rounds} rounds")
    print(f"{'':8} {'step ms':>9} {'no_sync ms':>11} {'comm ms':>9} "
          f"{'step cpu ms':>12} {'no_sync cpu ms':>15}")
    for name, r in (("C++", c), ("Python", p)):
        print(f"{name:8} {r['step_ms']:9.2f} {r['nosync_ms']:11.2f} "
              f"{r['step_ms'] - r['nosync_ms']:9.2f} {r['step_cpu_ms']:12.2f} "
              f"{r['nosync_cpu_ms']:15.2f}")
    print(f"ratio C++/Python step time: {c['step_ms'] / p['step_ms']:.3f} "
          f"(goal <= 1.0)")
    print(f"ratio C++/Python step CPU time: "
          f"{c['step_cpu_ms'] / p['step_cpu_ms']:.3f} (robust to a loaded "
          f"machine)")


if __name__ == "__main__":
    main()
