#!/usr/bin/env python3
"""After a ctest run: did it run every test it registered, and what passed,
failed and was skipped (and why)?

  ctest_summary.py --build BUILD --junit RESULT.xml [--regex REGEX]
                   [--exclude REGEX] [--label LABEL] [--line-file FILE]

RESULT.xml is the run's `ctest --output-junit`; REGEX the run's `ctest -R`
(--exclude: its `ctest -E`).
Checks, each a failure (exit 1) with the names:
  - every test ctest registers (`ctest --show-only=json-v1`) has a result
    in RESULT.xml: the number ctest ran equals the number registered;
  - every ctest test of a Catch2 binary (registered by
    ddprun_catch_discover_tests: its command carries --warn NoTests or
    --warn UnmatchedTestSpec) names a test case that its binary lists, and
    every test case the binary lists has its ctest test (a name split at
    ';' fails both ways);
  - a "not run" result is a skip only when ctest skipped it (the test's
    SKIP_RETURN_CODE or SKIP_REGULAR_EXPRESSION), otherwise a failure;
  - every test has a label (README, "Development": `ctest -L unit` is the
    inner loop, so a test without one would drop out of every subset).
Prints one line (also written to FILE):
  LABEL: R registered, R ran: P passed, F failed, S skipped (REASON x N; ...)
where a skip's reason is what follows "DDPRUN_SKIP: " in its output
(tests/catch/ddprun_skip.h, tests/skip.sh). Exit 0 when the checks hold
(failed tests are ctest's to report: its exit status says so).
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

CATCH_FLAGS = {"NoTests", "UnmatchedTestSpec"}
MARKER = re.compile(r"DDPRUN_SKIP: (.*)")


def registered_tests(build, regex, exclude=""):
    cmd = ["ctest", "--show-only=json-v1"]
    if regex:
        cmd += ["-R", regex]
    if exclude:
        cmd += ["-E", exclude]
    out = subprocess.run(cmd, cwd=build, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["tests"]


def catch_name_arg(command):
    """The test-case argument of a Catch2 ctest command, or None when the
    command is not one of ddprun_catch_discover_tests."""
    for i, arg in enumerate(command[:-1]):
        if arg == "--warn" and command[i + 1] in CATCH_FLAGS:
            return command[1]
    return None


def unescape(spec):
    # catch_discover_tests escapes these with a backslash (v3 also "\\").
    return re.sub(r"\\([\\,\[\]])", r"\1", spec)


def listed_cases(executable):
    """The test cases a Catch2 binary runs by default (v2, then v3 flags)."""
    for flags in (["--list-test-names-only"],
                  ["--list-tests", "--verbosity", "quiet"]):
        proc = subprocess.run([executable] + flags, capture_output=True,
                              text=True, timeout=120)
        names = [line.strip() for line in proc.stdout.splitlines()
                 if line.strip()]
        # v2 exits with the number of tests listed, v3 with 0; v3 refuses
        # v2's flag with "Error(s) in input:".
        if (names and proc.returncode >= 0 and not proc.stderr.strip() and
                not any(n.startswith("Error(s) in input") for n in names)):
            return names
    raise RuntimeError("%s lists no test cases" % executable)


def check_catch(tests, regex, exclude=""):
    """Problems between the Catch2 binaries' test cases and ctest's tests."""
    by_exe = collections.defaultdict(dict)  # exe -> {case: ctest name}
    for t in tests:
        name_arg = catch_name_arg(t.get("command") or [])
        if name_arg is not None:
            case = unescape(name_arg)
            by_exe[t["command"][0]][case] = t["name"]
    problems = []
    for exe, cases in sorted(by_exe.items()):
        prefixes = {ctest_name[:len(ctest_name) - len(case)]
                    for case, ctest_name in cases.items()
                    if ctest_name.endswith(case)}
        for case, ctest_name in sorted(cases.items()):
            if not ctest_name.endswith(case):
                problems.append("%s: ctest test '%s' runs '%s'"
                                % (exe, ctest_name, case))
        prefix = prefixes.pop() if len(prefixes) == 1 else ""
        listed = listed_cases(exe)
        if regex:
            listed = [c for c in listed if re.search(regex, prefix + c)]
        if exclude:
            listed = [c for c in listed
                      if not re.search(exclude, prefix + c)]
        for case in sorted(set(listed) - set(cases)):
            problems.append("%s: test case '%s' has no ctest test"
                            % (exe, case))
        for case in sorted(set(cases) - set(listed)):
            problems.append("%s: ctest test '%s' matches no test case"
                            % (exe, cases[case]))
    return problems, sum(len(c) for c in by_exe.values())


def results(junit):
    """{name: (outcome, reason)}, outcome one of passed/failed/skipped."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        status = case.get("status")
        text = case.findtext("system-out") or ""
        if status == "run":
            out[name] = ("passed", "")
        elif status == "fail":
            out[name] = ("failed", "")
        else:
            skipped = case.find("skipped")
            why = skipped.get("message", "") if skipped is not None else ""
            if why.startswith(("SKIP_RETURN_CODE", "SKIP_REGULAR_EXPRESSION")):
                found = MARKER.findall(text)
                out[name] = ("skipped",
                             found[-1].strip() if found else why)
            else:
                out[name] = ("failed", "not run: %s" % (why or status))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True)
    p.add_argument("--junit", required=True)
    p.add_argument("--regex", default="")
    p.add_argument("--exclude", default="")
    p.add_argument("--label", default="tests")
    p.add_argument("--line-file")
    a = p.parse_args()

    tests = registered_tests(a.build, a.regex, a.exclude)
    problems, catch_count = check_catch(tests, a.regex, a.exclude)
    got = results(os.path.join(a.build, a.junit)) if os.path.exists(
        os.path.join(a.build, a.junit)) else {}
    registered = [t["name"] for t in tests]
    for t in tests:
        labels = [p for p in t.get("properties", []) if p["name"] == "LABELS"]
        if not labels or not labels[0]["value"]:
            problems.append("no label: %s" % t["name"])
    for name in registered:
        if name not in got:
            problems.append("registered but not run: %s" % name)
    for name in sorted(set(got) - set(registered)):
        problems.append("ran but not registered (another -R?): %s" % name)
    counts = collections.Counter(outcome for outcome, _ in got.values())
    reasons = collections.Counter(
        why for outcome, why in got.values() if outcome == "skipped")
    skip_text = "; ".join("%s x %d" % (why, n) if n > 1 else why
                          for why, n in sorted(reasons.items()))
    line = ("%s: %d registered (%d Catch2 test cases), %d ran: %d passed, "
            "%d failed, %d skipped%s" % (
                a.label, len(registered), catch_count, len(got),
                counts["passed"], counts["failed"], counts["skipped"],
                " (%s)" % skip_text if skip_text else ""))
    for problem in problems:
        print("ctest_summary: %s" % problem, file=sys.stderr)
    if problems:
        line += " -- %d problem(s) with the count, listed above" % len(
            problems)
    print(line)
    if a.line_file:
        with open(a.line_file, "w") as f:
            f.write(line + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
