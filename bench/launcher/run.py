#!/usr/bin/python3
"""ddprun vs Debian's torchrun 1.13, side by side, in one run.

  /usr/bin/python3 bench/launcher/run.py --build-dir build [--runs 10]

Measures, for ddprun, torchrun at its defaults (1.13: --monitor_interval 5)
and torchrun with --monitor_interval 0.1:
  (a) launch -> exit wall time of
      `--standalone --nproc_per_node=4 --no_python true` (median of --runs);
  (b) worker crash -> every worker of the next attempt started: rank 0 of
      attempt 0 crashes once all 4 workers run, --max_restarts=1; measured
      from the crash timestamp to the last start timestamp of attempt 1
      (median of --crash-runs);
  (c) the agent's peak RSS (VmHWM of the launcher process itself, workers
      excluded) while 4 workers run for 1.5 s (max over 3 runs).
Prints a table with torchrun/ddprun ratios and the project's goals:
(a) >= 20x faster than torchrun's default and >= 5x than with 0.1 s,
(b) <= 100 ms, (c) <= 20 MB. Not part of ctest. Exit 0 even when a goal is
missed (the table says MISS); exit 1 only when a launch itself fails.

With --wheel WHEEL (scripts/build_wheel.sh) the wheel is pip-installed into
a fresh venv of /usr/bin/python3 and its entry point venv/bin/ddprun (a
shell script that execs the packaged binary) is measured against that
packaged binary run directly, interleaved, in the same run, with the venv
activated (its bin/ first on PATH): (a) and (d) `ddprun --version`
launch->exit, medians of --runs, with entry point/binary ratios and the
milliseconds the script adds. --no-torchrun prints
only that table (~1 min).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIMEOUT_S = 120


def launchers(args, tmp):
    """(label, command prefix, env) for each launcher under test."""
    fix_dir = os.path.join(tmp, "sitecustomize")
    os.makedirs(fix_dir)
    shutil.copy(os.path.join(args.shared, "reference", "torchrun_py311_fix.py"),
                os.path.join(fix_dir, "sitecustomize.py"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_"))}
    env["PYTHON_EXEC"] = PYTHON
    torch_env = dict(env)
    torch_env["PYTHONPATH"] = fix_dir + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    torchrun = [PYTHON, "-m", "torch.distributed.run"]
    return [("ddprun", [args.ddprun], env),
            ("torchrun", torchrun, torch_env),
            ("torchrun mi=0.1", torchrun + ["--monitor_interval", "0.1"],
             torch_env)]


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    if p.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" %
                 (what, p.returncode, p.stdout.decode(errors="replace")[-3000:]))


def install_wheel(wheel, tmp):
    """(venv/bin/ddprun, the binary it execs) of a fresh venv with
    `wheel` installed."""
    venv = os.path.join(tmp, "venv")
    vpy = os.path.join(venv, "bin", "python")
    run([PYTHON, "-m", "venv", "--system-site-packages", venv], None, "venv")
    run([vpy, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
         "--disable-pip-version-check", wheel], None, "pip install")
    p = subprocess.run([vpy, "-c", "import ddprun; print(ddprun.BIN_DIR)"],
                       stdout=subprocess.PIPE, check=True)
    return (os.path.join(venv, "bin", "ddprun"),
            os.path.join(p.stdout.decode().strip(), "ddprun"), vpy)


def measure_wheel(wheel, env, runs, tmp):
    """{(what, 'entry point'|'binary'): median} for (a) launch->exit in s
    and (d) --version in ms, the two interleaved run by run."""
    entry_point, binary, vpy = install_wheel(os.path.abspath(wheel), tmp)
    # An activated venv: its bin/ first on PATH, so both sides' workers run
    # the venv's python3 (outside PATH the entry point would hand them the
    # venv's interpreter and the binary /usr/bin/python3: not the same work).
    env = dict(env)
    env["PATH"] = os.path.dirname(entry_point) + os.pathsep + env["PATH"]
    samples = {}

    def timed_ms(cmd, what):
        t0 = time.perf_counter()
        run(cmd, env, what)
        return (time.perf_counter() - t0) * 1e3

    for _ in range(runs):
        for label, exe in (("binary", binary), ("entry point", entry_point)):
            samples.setdefault(("d", label), []).append(
                timed_ms([exe, "--version"], label + " --version"))
            samples.setdefault(("a", label), []).append(
                launch_exit_s([exe], env, label))
        samples.setdefault("python", []).append(
            timed_ms([vpy, "-c", "pass"], "python -c pass"))
    return {k: statistics.median(v) for k, v in samples.items()}


def print_wheel_table(med, runs):
    print("%-33s %9s %12s %7s %9s" % ("wheel entry point vs binary",
                                      "binary", "entry point", "ratio",
                                      "added ms"))
    for name, key, fmt, to_ms in (
            ("(a) launch->exit, median s", "a", "%.3f", 1e3),
            ("(d) --version, median ms", "d", "%.1f", 1.0)):
        b, w = med[(key, "binary")], med[(key, "entry point")]
        print("%-33s %9s %12s %6.2fx %9.1f" %
              (name, fmt % b, fmt % w, w / b, (w - b) * to_ms))
    print("the venv's `python -c pass` alone: %.1f ms (median, same runs): "
          "what a Python console script would add; the wheel's entry point "
          "is a shell script that execs the binary" % med["python"])
    print("(runs: %d each, interleaved; entry point = bin/ddprun of a venv "
          "of %s holding the wheel)\n" % (runs, PYTHON))


def launch_exit_s(prefix, env, label):
    cmd = prefix + ["--standalone", "--nproc_per_node=4", "--no_python",
                    "true"]
    t0 = time.perf_counter()
    run(cmd, env, label + " launch")
    return time.perf_counter() - t0


def read_ns(path):
    with open(path) as f:
        return int(f.read())


def crash_to_restarted_ms(prefix, env, label, worker):
    out = tempfile.mkdtemp(prefix="ddprun_bench_")
    try:
        env = dict(env, BENCH_CRASH_RANK="0")
        cmd = prefix + ["--standalone", "--nproc_per_node=4",
                        "--max_restarts=1", "--no_python", worker, "start",
                        out]
        run(cmd, env, label + " restart")
        starts = [read_ns(os.path.join(out, "start_1_%d" % r))
                  for r in range(4)]
        return (max(starts) - read_ns(os.path.join(out, "crash"))) / 1e6
    finally:
        shutil.rmtree(out, ignore_errors=True)


def peak_rss_mb(prefix, env, label, worker):
    cmd = prefix + ["--standalone", "--nproc_per_node=4", "--no_python",
                    worker, "sleep", "1500"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    hwm_kb = 0
    deadline = time.monotonic() + TIMEOUT_S
    while p.poll() is None and time.monotonic() < deadline:
        try:
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm_kb = max(hwm_kb, int(line.split()[1]))
        except OSError:
            pass  # exited between poll() and open()
        time.sleep(0.01)
    if p.poll() is None:
        p.kill()
        sys.exit("%s did not finish in %d s" % (label, TIMEOUT_S))
    if p.returncode != 0:
        sys.exit("%s rss run failed (exit %d)" % (label, p.returncode))
    return hwm_kb / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    parser.add_argument("--ddprun", help="default: BUILD_DIR/bin/ddprun")
    parser.add_argument("--worker",
                        help="default: BUILD_DIR/bin/launcher_bench_worker")
    parser.add_argument("--shared",
                        default=os.environ.get(
                            "DDPRUN_SHARED_DIR",
                            os.path.join(REPO, "..", "shared")))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--crash-runs", type=int, default=5)
    parser.add_argument("--wheel", help="also measure this wheel's entry "
                        "point against its binary")
    parser.add_argument("--no-torchrun", action="store_true",
                        help="with --wheel: only the wheel table")
    args = parser.parse_args()
    if args.no_torchrun and not args.wheel:
        parser.error("--no-torchrun leaves nothing to measure without --wheel")
    bin_dir = os.path.join(os.path.abspath(args.build_dir), "bin")
    args.ddprun = args.ddprun or os.path.join(bin_dir, "ddprun")
    args.worker = args.worker or os.path.join(bin_dir, "launcher_bench_worker")
    for path in ([] if args.no_torchrun else [args.ddprun, args.worker]):
        if not os.access(path, os.X_OK):
            sys.exit("not built: %s (ninja ddprun launcher_bench_worker)" % path)

    tmp = tempfile.mkdtemp(prefix="ddprun_bench_launchers_")
    results = {}
    try:
        if args.wheel:
            print("measuring the wheel's entry point ...", file=sys.stderr,
                  flush=True)
            # As a user's shell has it: no PYTHON_EXEC.
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PET_", "TORCHELASTIC_")) and
                   k != "PYTHON_EXEC"}
            print_wheel_table(measure_wheel(args.wheel, env, args.runs, tmp),
                              args.runs)
        if args.no_torchrun:
            return
        for label, prefix, env in launchers(args, tmp):
            print("measuring %s ..." % label, file=sys.stderr, flush=True)
            a = [launch_exit_s(prefix, env, label) for _ in range(args.runs)]
            b = [crash_to_restarted_ms(prefix, env, label, args.worker)
                 for _ in range(args.crash_runs)]
            c = [peak_rss_mb(prefix, env, label, args.worker)
                 for _ in range(3)]
            results[label] = (statistics.median(a), statistics.median(b),
                              max(c))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    d = results["ddprun"]
    t = results["torchrun"]
    t01 = results["torchrun mi=0.1"]
    rows = [
        ("(a) launch->exit, median s", 0, "%.3f"),
        ("(b) crash->restarted, median ms", 1, "%.1f"),
        ("(c) agent peak RSS, MB", 2, "%.1f"),
    ]
    print("%-33s %9s %11s %7s %15s %7s" %
          ("metric", "ddprun", "torchrun", "ratio", "torchrun mi=0.1",
           "ratio"))
    for name, i, fmt in rows:
        print("%-33s %9s %11s %6.1fx %15s %6.1fx" %
              (name, fmt % d[i], fmt % t[i], t[i] / d[i], fmt % t01[i],
               t01[i] / d[i]))
    goals = [
        ("(a) >= 20x faster than torchrun default", t[0] / d[0] >= 20),
        ("(a) >= 5x faster than torchrun mi=0.1", t01[0] / d[0] >= 5),
        ("(b) crash->restarted <= 100 ms", d[1] <= 100),
        ("(c) agent peak RSS <= 20 MB", d[2] <= 20),
    ]
    print()
    for name, ok in goals:
        print("%-42s %s" % (name, "PASS" if ok else "MISS"))
    print("(runs: a=%d, b=%d, c=3; torchrun = Debian %s)" %
          (args.runs, args.crash_runs, torch_version()))


def torch_version():
    p = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return p.stdout.decode().strip() or "torch ?"


if __name__ == "__main__":
    main()
