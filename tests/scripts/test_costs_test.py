#!/usr/bin/env python3
"""tests/test_costs.txt reaches ctest: in this build (argv[2]) every test
the table names is registered (a renamed test would lose its place in the
schedule: regenerate with scripts/test_costs.py), and ctest reports the
table's seconds as COST both for a test add_test() declares and for a
Catch test found by discovery. Then scripts/test_costs.py on a miniature
JUnit file: the first file wins, short tests are left out, names ctest
does not register are dropped with --build, and a name CMake cannot carry
as a list element is refused. Exit 0 when all hold; prints each failure."""
import os
import subprocess
import sys
import tempfile

source, build = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def table(path):
    costs = {}
    with open(path) as f:
        for line in f:
            if line[:1].isdigit():
                seconds, name = line.rstrip("\n").split("\t", 1)
                costs[name] = float(seconds)
    return costs


sys.path.insert(0, os.path.join(source, "scripts"))
from test_costs import shown_tests  # noqa: E402

shown = shown_tests(build)
cost_of = {}
for test in shown:
    for prop in test.get("properties", []):
        if prop["name"] == "COST":
            cost_of[test["name"]] = float(prop["value"])
costs = table(os.path.join(source, "tests", "test_costs.txt"))
missing = sorted(set(costs) - {t["name"] for t in shown})
check(not missing, "tests/test_costs.txt names tests this build does not "
      "register (regenerate it with scripts/test_costs.py): " +
      "; ".join(missing[:5]))
wrong = sorted(n for n, s in costs.items()
               if n in cost_of and abs(cost_of[n] - s) > 0.05)
unset = sorted(n for n in costs if n not in cost_of and n not in missing)
check(not wrong, "COST differs from the table: " + "; ".join(wrong[:5]))
check(not unset, "no COST on: " + "; ".join(unset[:5]))
catch = [n for n in cost_of if ": " in n]  # Catch's names hold ": "
check(catch, "no Catch test has a COST")
check(len(cost_of) > len(catch), "no add_test() test has a COST")

script = os.path.join(source, "scripts", "test_costs.py")
with tempfile.TemporaryDirectory() as tmp:
    def junit(name, cases):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write("<testsuite>")
            for case, seconds in cases:
                f.write(f'<testcase name="{case}" time="{seconds}"/>')
            f.write("</testsuite>")
        return path

    host = junit("host.xml", [("a/long one", 120.04), ("a/short", 0.2),
                              ("b/both", 30)])
    leg = junit("leg.xml", [("b/both", 99), ("c/leg only", 12)])
    out = os.path.join(tmp, "costs.txt")
    r = subprocess.run([sys.executable, script, "--junit", host, "--junit",
                        leg, "--out", out], capture_output=True, text=True)
    check(r.returncode == 0, "test_costs.py failed: " + r.stderr)
    got = table(out) if r.returncode == 0 else {}
    check(got == {"a/long one": 120.0, "b/both": 30.0, "c/leg only": 12.0},
          f"test_costs.py wrote {got}")
    # --build: only what that build registers (this one has neither name).
    r = subprocess.run([sys.executable, script, "--junit", host, "--build",
                        build, "--out", out], capture_output=True, text=True)
    check(r.returncode == 0 and table(out) == {}
          and "not registered" in r.stderr and "a/long one" in r.stderr,
          f"--build kept {table(out)}, said {r.stderr!r}")
    bad = junit("bad.xml", [("x/one [two", 5)])
    r = subprocess.run([sys.executable, script, "--junit", bad, "--out", out],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "x/one [two" in r.stderr,
          f"a name with an unbalanced '[' was taken: {r.returncode}")

for failure in failures:
    print("FAIL:", failure)
print(f"test costs: {len(costs)} in the table, {len(cost_of)} with a COST "
      f"here, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
