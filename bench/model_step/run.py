#!/usr/bin/env python3
"""C++ trainer step vs the same model in Python PyTorch eager, same device,
same run.

For each trainer and precision: model_step_bench (the trainer's C++ model,
loss, optimizer and precision, built from its model library) and
twin_bench.py (the same model layer for layer in plain PyTorch, twins.py)
each run --warmup untimed
and --steps timed training steps on a fixed random batch in a fresh process;
the two sides alternate for --rounds rounds (C++ first in even rounds,
Python first in odd ones) and the table shows the medians and the ratio
C++/Python of samples/s (goal >= 1.0). Both sides must report the same
parameter count and the same parameter and buffer shapes in the same order,
else that configuration fails. --check first runs the C++ step from
exported weights and batch in the Python twin (twin_bench.py --compare); a
trainer whose losses, updated weights or batch-norm statistics differ is
reported (MISMATCH, and "ok": false in --json) and makes the exit status 1,
but its configurations are still timed, as are the other trainers'.

  /usr/bin/python3 bench/model_step/run.py --bin-dir build/bin
      [--device cpu|cuda] [--precision fp32[,bf16,fp16]] [--steps 20]
      [--warmup 5] [--rounds 3] [--trainers survival,ddpm,vqa,segmentation]
      [--threads N] [--check] [--json OUT]

--threads: intra-op threads of both sides (and OMP_NUM_THREADS); default 1
on CPU so the sides compare like for like, 0 (Torch's default) on CUDA.
The C++ side tunes glibc malloc as every trainer does (worker/include/
ddprun/worker/host_allocator.h); by default the Python side gets the same
settings through GLIBC_TUNABLES (--python-malloc same), so the ratio
compares the training code, not the allocator; --python-malloc default runs
Python with glibc's defaults, as a user would.
A configuration that fails on both sides (an op this Torch lacks at that
precision) is reported as a table row with the error, not measured.
Exit: 0 done, 1 a check or a configuration failed (the rest still ran and
is in --json), 2 bad flags, 77 the Python interpreter has no torch (the
ctest counts that as skipped)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINERS = ("survival", "ddpm", "vqa", "segmentation")
MATCHING = ("params", "param_shapes", "buffer_shapes", "samples_per_step")


class BenchError(Exception):
    pass


def run_json(cmd, env, timeout):
    """Runs cmd, returns the JSON object of its last '{' line."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise BenchError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n"
                         f"{p.stderr.strip()[-3000:]}")
    result = json.loads(lines[-1])
    if p.returncode != 0 and result.get("ok", True):
        raise BenchError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return result


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"),
                    help="folder with model_step_bench (default: build/bin)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", default="fp32",
                    help="fp32, bf16, fp16 (CUDA), or a comma list")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trainers", default=",".join(TRAINERS))
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads on both sides (default 1 on CPU, 0 = "
                         "Torch's default on CUDA)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter for the twins, with the torch to compare "
                         "against (default: this one)")
    ap.add_argument("--python-malloc", choices=("same", "default"), default="same")
    ap.add_argument("--python-adam-foreach", choices=("default", "off"), default="default",
                    help="off: the twins' Adam works one parameter at a time, as "
                         "LibTorch's does (torch's default on CUDA is multi-tensor)")
    ap.add_argument("--check", action="store_true",
                    help="first compare each twin with the C++ step numerically")
    ap.add_argument("--check-steps", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    ap.add_argument("--json", metavar="OUT", help="write every result here")
    a = ap.parse_args()
    a.trainers = [t for t in a.trainers.split(",") if t]
    a.precision = [p for p in a.precision.split(",") if p]
    bad = [t for t in a.trainers if t not in TRAINERS]
    bad += [p for p in a.precision if p not in ("fp32", "bf16", "fp16")]
    if bad or not a.trainers or not a.precision:
        ap.error(f"unknown trainer or precision: {', '.join(bad) or '(none)'}")
    if not a.device.startswith("cuda") and "fp16" in a.precision:
        ap.error("--precision fp16 needs --device cuda (CPU autocast is bf16 only)")
    if a.steps < 1 or a.warmup < 0 or a.rounds < 1 or a.check_steps < 1:
        ap.error("--steps, --rounds, --check-steps must be >= 1, --warmup >= 0")
    if a.threads is None:
        a.threads = 0 if a.device.startswith("cuda") else 1
    return a


class Sides:
    """Command lines and environments of the two sides."""

    def __init__(self, a):
        self.a = a
        self.bench = os.path.join(a.bin_dir, "model_step_bench")
        if not os.access(self.bench, os.X_OK):
            raise BenchError(f"{self.bench} not found: build the model_step_bench target")
        self.twins = [a.python, os.path.join(HERE, "twin_bench.py")]
        env = dict(os.environ)
        # The caller's malloc settings would turn the C++ tuning off.
        for name in ("GLIBC_TUNABLES", "DDPRUN_MALLOC_TUNING", "LD_PRELOAD"):
            env.pop(name, None)
        if a.threads > 0:
            env["OMP_NUM_THREADS"] = str(a.threads)
        self.cpp_env = env
        self.py_env = dict(env)
        if a.python_malloc == "same":
            self.py_env["GLIBC_TUNABLES"] = subprocess.run(
                [self.bench, "--malloc-tunables"], check=True, capture_output=True,
                text=True).stdout.strip()

    def common(self, trainer, precision):
        return ["--trainer", trainer, "--device", self.a.device, "--precision", precision,
                "--threads", str(self.a.threads)]

    def run(self, side, trainer, precision):
        flags = self.common(trainer, precision) + [
            "--steps", str(self.a.steps), "--warmup", str(self.a.warmup)]
        if side == "cpp":
            return run_json([self.bench] + flags, self.cpp_env, self.a.timeout)
        flags += ["--adam-foreach", self.a.python_adam_foreach]
        return run_json(self.twins + flags, self.py_env, self.a.timeout)

    def check(self, trainer):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{trainer}.pt")
            flags = self.common(trainer, "fp32") + ["--steps", str(self.a.check_steps)]
            p = subprocess.run([self.bench] + flags + ["--export", path], env=self.cpp_env,
                               capture_output=True, text=True, timeout=self.a.timeout)
            if p.returncode != 0:
                raise BenchError(f"model_step_bench --export failed: {p.stderr.strip()}")
            return run_json(self.twins + self.common(trainer, "fp32") + ["--compare", path],
                            self.py_env, self.a.timeout)


def check_one(sides, trainer, report):
    """Runs the numerical check of one trainer's twin and records it in
    report["checks"] (ok False with an "error" when it could not run)."""
    try:
        c = sides.check(trainer)
    except (BenchError, subprocess.TimeoutExpired) as e:
        c = {"trainer": trainer, "ok": False, "error": last_error_line(e)}
    report["checks"].append(c)
    if "error" in c:
        print(f"check {trainer}: FAILED to run: {c['error']}", flush=True)
    elif not c["ok"]:
        print(f"check {trainer}: MISMATCH, the Python twin does not compute what the "
              f"C++ step computes: {json.dumps(c)}", flush=True)
    else:
        print(f"check {trainer}: twin matches C++ over {c['steps']} steps (loss "
              f"rel diff {c['max_loss_rel_diff']:.1e}, weights "
              f"{c['max_param_abs_diff']:.1e}, buffers "
              f"{c['max_buffer_abs_diff']:.1e})", flush=True)


def compare_sides(cpp, py):
    for key in MATCHING:
        if cpp[key] != py[key]:
            what = (f"{cpp[key]} vs {py[key]}" if key in ("params", "samples_per_step")
                    else "differ")
            raise BenchError(f"{cpp['trainer']}: C++ and Python {key} {what}: the twin "
                             f"in twins.py no longer matches the C++ model")


def last_error_line(error):
    lines = [l for l in str(error).splitlines()[1:] if l.strip()]
    return lines[-1].strip() if lines else str(error)


def bench_one(sides, trainer, precision, rounds):
    """Medians over the rounds. A configuration that fails on both sides
    (e.g. an op the Torch version lacks for that precision) is a row with
    the error; failing on one side only is a BenchError."""
    runs = {"cpp": [], "python": []}
    errors = {}
    for side in ("cpp", "python"):
        try:
            runs[side].append(sides.run(side, trainer, precision))
        except BenchError as e:
            errors[side] = e
    if len(errors) == 2:
        return {"trainer": trainer, "precision": precision,
                "error": {s: last_error_line(e) for s, e in errors.items()}}
    if errors:
        raise next(iter(errors.values()))
    for r in range(1, rounds):
        for side in (("cpp", "python") if r % 2 == 0 else ("python", "cpp")):
            runs[side].append(sides.run(side, trainer, precision))
    compare_sides(runs["cpp"][0], runs["python"][0])
    med = {s: statistics.median(x["samples_per_s"] for x in runs[s]) for s in runs}
    cpu = {s: statistics.median(x["cpu_ms_per_step"] for x in runs[s]) for s in runs}
    return {"trainer": trainer, "precision": precision, "params": runs["cpp"][0]["params"],
            "batch": runs["cpp"][0]["batch"], "cpp_samples_per_s": med["cpp"],
            "python_samples_per_s": med["python"], "ratio": med["cpp"] / med["python"],
            "cpp_cpu_ms_per_step": cpu["cpp"], "python_cpu_ms_per_step": cpu["python"],
            "cpu_ratio": cpu["python"] / cpu["cpp"], "runs": runs}


def print_table(rows, device):
    head = (f"{'trainer':<13}{'device':<8}{'precision':<10}{'params':>9}"
            f"{'C++ samples/s':>15}{'Py samples/s':>14}{'C++/Py':>8}"
            f"{'CPU ms C++':>12}{'CPU ms Py':>11}{'Py/C++':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "failed" in r:
            print(f"{r['trainer']:<13}{device:<8}{r['precision']:<10}  FAILED: {r['failed']}")
            continue
        if "error" in r:
            print(f"{r['trainer']:<13}{device:<8}{r['precision']:<10}  fails on both sides: "
                  f"{r['error']['cpp']}")
            continue
        print(f"{r['trainer']:<13}{device:<8}{r['precision']:<10}{r['params']:>9}"
              f"{r['cpp_samples_per_s']:>15.2f}{r['python_samples_per_s']:>14.2f}"
              f"{r['ratio']:>8.3f}{r['cpp_cpu_ms_per_step']:>12.1f}"
              f"{r['python_cpu_ms_per_step']:>11.1f}{r['cpu_ratio']:>8.3f}")


def main():
    a = parse_args()
    probe = subprocess.run([a.python, "-c", "import torch"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"run.py: {a.python} cannot import torch; skipped", file=sys.stderr)
        return 77
    try:
        sides = Sides(a)
        report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": a.device,
                  "threads": a.threads, "steps": a.steps, "warmup": a.warmup,
                  "rounds": a.rounds, "python_malloc": a.python_malloc,
                  "python_adam_foreach": a.python_adam_foreach,
                  "load_average_before": load_average(), "checks": [], "rows": []}
        print(f"load average before: {report['load_average_before']}", flush=True)
        # A twin that differs (or a check that breaks) is reported and makes
        # the exit status 1, but every configuration is still timed: one
        # mismatch on a new device must not lose the other trainers' ratios.
        for trainer in a.trainers:
            if a.check:
                check_one(sides, trainer, report)
            for precision in a.precision:
                try:
                    row = bench_one(sides, trainer, precision, a.rounds)
                except (BenchError, subprocess.TimeoutExpired) as e:
                    row = {"trainer": trainer, "precision": precision,
                           "failed": last_error_line(e)}
                    print(f"run.py: error: {e}", file=sys.stderr, flush=True)
                report["rows"].append(row)
                if "failed" in row:
                    continue
                if "error" in row:
                    print(f"{trainer} {precision}: fails on both sides: {row['error']}",
                          flush=True)
                    continue
                print(f"{trainer} {precision}: C++ {row['cpp_samples_per_s']:.2f} vs "
                      f"Python {row['python_samples_per_s']:.2f} samples/s "
                      f"(ratio {row['ratio']:.3f})", flush=True)
    except BenchError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 1
    report["load_average_after"] = load_average()
    bad_checks = [c["trainer"] for c in report["checks"] if not c["ok"]]
    failed_rows = [f"{r['trainer']} {r['precision']}" for r in report["rows"] if "failed" in r]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    measured = [r for r in report["rows"] if "runs" in r]
    if not measured:
        print("run.py: no configuration was measured", file=sys.stderr)
        return 1
    first = measured[0]["runs"]
    report["torch_cpp"] = first["cpp"][0]["torch_version"]
    report["torch_python"] = first["python"][0]["torch_version"]
    report["device_name"] = first["python"][0]["device_name"]
    print()
    print(f"device: {a.device} ({report['device_name']}), intra-op threads: "
          f"{first['cpp'][0]['threads']} (C++) / {first['python'][0]['threads']} (Python)")
    print(f"torch: C++ LibTorch {report['torch_cpp']}, Python torch "
          f"{report['torch_python']}; steps {a.steps} after {a.warmup} warm-up, "
          f"median of {a.rounds} alternating rounds; Python malloc: {a.python_malloc}, "
          f"Python Adam foreach: {a.python_adam_foreach}")
    print_table(report["rows"], a.device)
    print("C++/Py: ratio of samples/s (wall clock); CPU ms: process CPU time per step, "
          "Py/C++ its ratio (> 1: C++ used less CPU)")
    print(f"load average before: {report['load_average_before']}, after: "
          f"{report['load_average_after']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if bad_checks or failed_rows:
        print(f"run.py: FAILED: twins differing from the C++ step: "
              f"{', '.join(bad_checks) or 'none'}; configurations failing on one side: "
              f"{', '.join(failed_rows) or 'none'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
