#!/usr/bin/env python3
"""Writes tests/test_costs.txt, the seconds each test took in a full run,
from ctest's JUnit files (`ctest --output-junit`): tests/test_costs.cmake
gives them to ctest as COST, so the longest tests start first.

Why: without costs ctest starts tests in the order they are declared, and
a long test that starts late is the run's tail (a nothing-cached host run:
56 min of test time took 36 min at -j2). ctest's own cost file cannot hold
Catch's test names (it splits its lines at spaces), and a clean clone has
none.

  scripts/test_costs.py --junit build/ctest-results.xml \\
      [--junit <2.6 leg>/ctest-results.xml] [--build build] [--min 1.0]

The first JUnit file that has a test gives its time. --build drops the
names that build does not register (renamed or removed tests; they are
listed on stderr). Tests under --min seconds are left out: their order
does not matter. Exit 2 on a missing or unreadable file."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

HEADER = ("# Seconds each test took in a full run, for ctest's scheduling "
          "(tests/test_costs.cmake).\n"
          "# Written by scripts/test_costs.py from ctest's JUnit files; "
          "tab-separated: seconds, name.\n")


def read_junit(path):
    """{name: seconds} of one JUnit file."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as e:
        sys.exit(f"test_costs: cannot read {path}: {e}")
    times = {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if name:
            times[name] = float(case.get("time") or 0)
    return times


def shown_tests(build):
    """ctest's --show-only=json-v1 list of the tests `build` registers, each
    with its properties. ctest runs in a scratch folder that includes the
    build: even a listing rewrites <dir>/Testing/Temporary/LastTest.log,
    which a ctest run in progress there (this script as a test) is writing."""
    with tempfile.TemporaryDirectory() as scratch:
        with open(os.path.join(scratch, "CTestTestfile.cmake"), "w") as f:
            f.write(f'subdirs([==[{os.path.abspath(build)}]==])\n')
        try:
            out = subprocess.run(["ctest", "--show-only=json-v1"],
                                 cwd=scratch, capture_output=True, text=True,
                                 check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"test_costs: ctest --show-only of {build} failed: {e}")
    return json.loads(out)["tests"]


def registered(build):
    """The names ctest registers in `build`."""
    return {t["name"] for t in shown_tests(build)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", action="append", required=True)
    parser.add_argument("--build")
    parser.add_argument("--min", type=float, default=1.0)
    parser.add_argument("--out", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests",
        "test_costs.txt")))
    args = parser.parse_args()
    costs = {}
    for path in args.junit:
        for name, seconds in read_junit(path).items():
            costs.setdefault(name, seconds)
    if args.build:
        known = registered(args.build)
        for name in sorted(set(costs) - known):
            if costs[name] >= args.min:
                print(f"test_costs: not registered in {args.build}: {name}",
                      file=sys.stderr)
        costs = {n: s for n, s in costs.items() if n in known}
    kept = sorted((n, s) for n, s in costs.items() if s >= args.min)
    for name, _ in kept:
        # tests/test_costs.cmake reads the file as a CMake list: a ';' or an
        # unbalanced '[' would merge lines there.
        if any(c in name for c in "\t\n;") or name.count("[") != name.count("]"):
            sys.exit(f"test_costs: a test name CMake cannot carry: {name!r}")
    with open(args.out, "w") as out:
        out.write(HEADER)
        for name, seconds in kept:
            out.write(f"{seconds:.1f}\t{name}\n")
    print(f"test_costs: {len(kept)} tests of {args.min:g} s or more "
          f"({sum(s for _, s in kept) / 60:.0f} min) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
