#!/usr/bin/env python3
"""Peak RSS of survival_trainer with and without --gradient_checkpointing.

Usage: bench/survival_memory/run.py [--build-dir build] [--configs default,guide]

For each configuration the same training run (same data, seed and steps;
one process, OMP_NUM_THREADS=1, no validation-heavy settings) runs twice,
without and with activation checkpointing, and the table gives each run's
peak resident set size (the kernel's ru_maxrss of that process, from
wait4), their ratio, the memory saved and the samples/s ratio (the cost of
the recomputation). Configurations:
  default  the trainer's defaults: resnet10, width 8, 32^3 volumes, batch 8
  guide    the guide's "Advanced Configuration" model and volume size:
           resnet50 on 256x256x64 volumes, batch 8 (the guide's batch 48
           does not fit a 2-core CI box in minutes)
Not part of ctest: the guide configuration takes a few minutes on 2 cores.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = {
    "default": ["--batch_size", "8"],
    "guide": ["--resnet", "resnet50", "--image_size", "256", "256", "64",
              "--batch_size", "8"],
}


def run(cmd, env):
    """Runs cmd; returns (exit code, peak RSS in MB, output)."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        return proc.returncode, usage.ru_maxrss / 1024.0, log.read().decode()


def samples_per_s(output_dir):
    with open(os.path.join(output_dir, "metrics.jsonl")) as f:
        return json.loads(f.read().splitlines()[-1])["samples_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--configs", default="default,guide")
    args = parser.parse_args()
    trainer = os.path.join(args.build_dir, "bin", "survival_trainer")
    if not os.access(trainer, os.X_OK):
        sys.exit(f"{trainer} is not built (ninja -C {args.build_dir} "
                 "survival_trainer)")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    work = tempfile.mkdtemp(prefix="survival_memory.")
    data = os.path.join(work, "data")
    code, _, out = run([trainer, "--make_synthetic", data, "--n", "32"], env)
    if code != 0:
        sys.exit(out)
    print(f"{'config':<9} {'plain MB':>9} {'ckpt MB':>9} {'ratio':>6} "
          f"{'saved MB':>9} {'speed':>6}")
    for name in args.configs.split(","):
        peaks, speeds = [], []
        for checkpointing in (False, True):
            out_dir = os.path.join(work, f"{name}-{int(checkpointing)}")
            cmd = [trainer, "--csv_path", os.path.join(data, "survival.csv"),
                   "--output_dir", out_dir, "--epochs", "1",
                   "--checkpoint_every", "0", "--num_workers", "1",
                   *CONFIGS[name]]
            if checkpointing:
                cmd.append("--gradient_checkpointing")
            code, peak, out = run(cmd, env)
            if code != 0:
                sys.exit(f"{' '.join(cmd)} failed:\n{out}")
            peaks.append(peak)
            speeds.append(samples_per_s(out_dir))
        print(f"{name:<9} {peaks[0]:9.0f} {peaks[1]:9.0f} "
              f"{peaks[1] / peaks[0]:6.2f} {peaks[0] - peaks[1]:9.0f} "
              f"{speeds[1] / speeds[0]:6.2f}")
    print("ratio = peak RSS with / without checkpointing (same run); speed = "
          "samples/s with / without")


if __name__ == "__main__":
    main()
