#!/usr/bin/env python3
"""ctest bench/model_step/check_keeps_timing: a --check that finds a twin
differing from its C++ step is reported, but does not stop the timing.

run.py's main() runs in this process on survival and vqa (fp32, one short
round each) with the real check, whose verdict for survival is turned into
a mismatch. Expected: exit 1; --json written with survival's check
"ok": false and vqa's true; both configurations timed (a C++/Python ratio
each), vqa's after survival's failed check.

  check_keeps_timing_test.py --bin-dir BUILD/bin   exit 0 pass, 1 fail, 77 no torch"""
import importlib.util
import json
import os
import sys
import tempfile
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--bin-dir":
        print("usage: check_keeps_timing_test.py --bin-dir BUILD/bin", file=sys.stderr)
        return 2
    bin_dir = sys.argv[2]
    if importlib.util.find_spec("torch") is None:
        print("no torch: skipped")
        return 77
    sys.path.insert(0, HERE)
    import run

    real_check = run.Sides.check

    def drifted(self, trainer):
        c = real_check(self, trainer)
        if trainer == "survival":
            c["ok"] = False
        return c

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model_step.json")
        argv = ["run.py", "--bin-dir", bin_dir, "--trainers", "survival,vqa",
                "--precision", "fp32", "--steps", "1", "--warmup", "0", "--rounds", "1",
                "--check", "--check-steps", "1", "--json", out]
        with mock.patch.object(run.Sides, "check", drifted), mock.patch.object(sys, "argv", argv):
            rc = run.main()
        if rc != 1:
            failures.append(f"exit {rc}, expected 1 for a differing twin")
        if not os.path.exists(out):
            failures.append("no --json written")
        else:
            report = json.load(open(out))
            checks = {c["trainer"]: c["ok"] for c in report["checks"]}
            if checks != {"survival": False, "vqa": True}:
                failures.append(f"checks recorded as {checks}")
            timed = [r["trainer"] for r in report["rows"] if "ratio" in r]
            if timed != ["survival", "vqa"]:
                failures.append(f"timed configurations {timed}, expected survival and vqa")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
