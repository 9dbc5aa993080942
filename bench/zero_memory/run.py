#!/usr/bin/env python3
"""What ZeRO sharding and optimizer offload save, measured in one run.

Runs bench/zero_memory's zero_memory_bench (vqa_trainer's model at --width
WIDTH, a few Adam steps on random batches) under
`ddprun --standalone --nproc_per_node=RANKS` once per optimizer setting
(each in fresh processes, since peak RSS only grows), and prints per
setting: the optimizer state each rank keeps beside the parameters (on
their device: the GPU memory ZeRO and offload free on a GPU), the state
offloaded to host memory, each rank's peak RSS, and the ratios against
plain Adam + DDP measured in the same run.

On a CPU-only machine the "device" is host memory too: offload then moves
the state from one part of the same RAM to another, so its RSS effect is
nil by construction; its device-side bytes are what it saves on a GPU.

Usage: python3 bench/zero_memory/run.py [--build-dir build] [--width 128]
       [--ranks 2] [--steps 4] [--batch 4]
"""
import argparse
import json
import os
import subprocess
import sys

MODES = [
    ("adam", "Adam + DDP (--zero 0)"),
    ("zero1", "ZeRO-1 (--zero 1)"),
    ("zero2", "ZeRO-2 (--zero 2)"),
    ("zero2_offload", "ZeRO-2 + CPU offload"),
]


def run_mode(args, mode):
    bindir = os.path.join(args.build_dir, "bin")
    cmd = [os.path.join(bindir, "ddprun"), "--standalone",
           "--nproc_per_node=%d" % args.ranks, "--no_python",
           os.path.join(bindir, "zero_memory_bench"), mode, str(args.width),
           str(args.steps), str(args.batch)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        sys.exit("%s failed (%d):\n%s%s" % (" ".join(cmd), done.returncode,
                                             done.stdout, done.stderr))
    rows = []
    for line in done.stdout.splitlines():
        start = line.find("{")
        if start >= 0 and '"mode"' in line:
            rows.append(json.loads(line[start:]))
    if len(rows) != args.ranks:
        sys.exit("expected %d result lines from %s, got:\n%s" %
                 (args.ranks, mode, done.stdout))
    return sorted(rows, key=lambda r: r["rank"])


def mb(b):
    return b / 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default="build")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    args = p.parse_args()

    results = {mode: run_mode(args, mode) for mode, _ in MODES}
    params = results["adam"][0]["params"]
    print("vqa model, width %d: %d parameters (%.1f MB float32); %d ranks, "
          "%d steps of batch %d per rank" %
          (args.width, params, mb(4 * params), args.ranks, args.steps,
           args.batch))
    base_dev = results["adam"][0]["device_state_bytes"]
    base_rss = max(r["peak_rss_kb"] for r in results["adam"])
    header = ("%-22s %12s %8s %12s %16s %10s %9s" %
              ("setting", "state on dev", "ratio", "state host",
               "peak RSS/rank", "RSS ratio", "step s"))
    print(header)
    print("-" * len(header))
    for mode, name in MODES:
        rows = results[mode]
        dev = rows[0]["device_state_bytes"]
        host = rows[0]["host_state_bytes"]
        rss = max(r["peak_rss_kb"] for r in rows)
        step = max(r["step_s"] for r in rows)
        print("%-22s %9.1f MB %8.2f %9.1f MB %13.1f MB %10.3f %9.3f" %
              (name, mb(dev), dev / base_dev, mb(host), rss / 1024.0,
               rss / base_rss, step))
    print()
    saved = base_rss - max(r["peak_rss_kb"] for r in results["zero2"])
    print("device-side optimizer state per rank: ZeRO-1/2 keep %.2f of "
          "Adam's, ZeRO-2 + offload %.2f (%.1f MB per rank freed on a GPU)" %
          (results["zero2"][0]["device_state_bytes"] / base_dev,
           results["zero2_offload"][0]["device_state_bytes"] / base_dev,
           mb(base_dev)))
    z2 = results["zero2"]
    off = results["zero2_offload"]
    print("ZeRO-2 + CPU offload vs ZeRO-2 without (same run): device-side "
          "state %.1f MB vs %.1f MB per rank (%.2f), host state %.1f MB vs "
          "%.1f MB, peak RSS %.3f" %
          (mb(off[0]["device_state_bytes"]), mb(z2[0]["device_state_bytes"]),
           off[0]["device_state_bytes"] / z2[0]["device_state_bytes"],
           mb(off[0]["host_state_bytes"]), mb(z2[0]["host_state_bytes"]),
           max(r["peak_rss_kb"] for r in off) /
           max(r["peak_rss_kb"] for r in z2)))
    print("peak RSS per rank, ZeRO-2 vs Adam + DDP: %+.1f MB (%.3f)" %
          (-saved / 1024.0,
           max(r["peak_rss_kb"] for r in results["zero2"]) / base_rss))


if __name__ == "__main__":
    main()
