#!/usr/bin/env python3
"""DDP step benchmark: our C++ DDP (ddprun worker runtime) vs Python's
torch.nn.parallel.DistributedDataParallel, same conv model, Gloo, 2 ranks on
loopback, run back to back in one invocation. Prints median step times, the
communication overhead (step with sync minus step under no_sync), minor page
faults per step and the ratio C++/Python (goal <= 1.0).

Variants, each run once per round (order rotated every round):
  C++          the runtime as trainers get it: InitFromEnv tunes glibc malloc
               (worker/include/ddprun/worker/host_allocator.h)
  C++ untuned  the same with DDPRUN_MALLOC_TUNING=0 (glibc defaults)
  Python       Debian's python3-torch as a user runs it (glibc defaults)
  Python+malloc  the same with GLIBC_TUNABLES set to the C++ runtime's
               settings: the like-for-like comparison of the DDP code itself
Every metric is the median over the steps of a run, then the median over the
rounds. On a shared machine wall times swing with other load (the load
average is printed); process CPU time per step is the more robust number.

  bench/ddp_step/run_bench.py --bin BUILD/bin [--world 2] [--steps 40]
      [--warmup 5] [--batch 32] [--threads 1] [--rounds 3]

Python runs with PYTHON_EXEC (default /usr/bin/python3, Debian's torch)."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS = ("step_ms", "nosync_ms", "step_cpu_ms", "nosync_cpu_ms",
           "step_faults", "nosync_faults")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmd, world, threads, extra_env):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS=str(threads), **extra_env)
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
    ap.add_argument("--rounds", type=int, default=3,
                    help="run every variant this many times, report medians")
    a = ap.parse_args()
    python = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
    bench = os.path.join(a.bin, "ddp_step_bench")
    tunables = subprocess.run([bench, "--malloc-tunables"], check=True,
                              capture_output=True, text=True).stdout.strip()
    # The caller's own malloc settings would switch the C++ tuning off.
    for name in ("GLIBC_TUNABLES", "DDPRUN_MALLOC_TUNING", "LD_PRELOAD"):
        os.environ.pop(name, None)
    args = [str(a.warmup), str(a.steps), str(a.batch)]
    cpp_cmd = [bench] + args
    py_cmd = [python, os.path.join(HERE, "ddp_step.py")] + args
    variants = [("C++", cpp_cmd, {}),
                ("C++ untuned", cpp_cmd, {"DDPRUN_MALLOC_TUNING": "0"}),
                ("Python", py_cmd, {}),
                ("Python+malloc", py_cmd, {"GLIBC_TUNABLES": tunables})]
    load_before = os.getloadavg()
    runs = {name: [] for name, _, _ in variants}
    for k in range(a.rounds):
        for name, cmd, env in variants[k % 4:] + variants[:k % 4]:
            runs[name].append(run_ranks(cmd, a.world, a.threads, env))
    load_after = os.getloadavg()
    med = {name: {m: statistics.median(r[m] for r in rs) for m in METRICS}
           for name, rs in runs.items()}
    print(f"DDP step, conv net, batch {a.batch}/rank, {a.world} ranks, Gloo, "
          f"{a.threads} thread(s)/rank; median of {a.steps} steps, median of "
          f"{a.rounds} rounds; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after ({os.cpu_count()} cores)")
    print(f"{'':14} {'step ms':>8} {'no_sync ms':>11} {'comm ms':>8} "
          f"{'step cpu ms':>12} {'no_sync cpu':>12} {'faults/step':>12}")
    for name, r in med.items():
        print(f"{name:14} {r['step_ms']:8.2f} {r['nosync_ms']:11.2f} "
              f"{r['step_ms'] - r['nosync_ms']:8.2f} {r['step_cpu_ms']:12.2f} "
              f"{r['nosync_cpu_ms']:12.2f} {r['step_faults']:12.0f}")
    c = med["C++"]
    for ref in ("Python", "Python+malloc"):
        p = med[ref]
        print(f"ratio C++/{ref}: step time {c['step_ms'] / p['step_ms']:.3f}, "
              f"step CPU time {c['step_cpu_ms'] / p['step_cpu_ms']:.3f} "
              f"(goal <= 1.0)")
    print("per-round step_ms / step_cpu_ms: " + "; ".join(
        f"{name} " + " ".join(f"{r['step_ms']:.0f}/{r['step_cpu_ms']:.0f}"
                              for r in rs) for name, rs in runs.items()))


if __name__ == "__main__":
    main()
