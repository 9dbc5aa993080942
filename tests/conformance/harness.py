"""The conformance drivers' common part: a case table, real launches under a
deadline, one line per case and the count.

A case is a command line taken from a peer's own launcher tests (its
`source` names the file and test), run against our binary with real
processes; `expect` states what the peer's test asserts, as a function of
the launch's result that raises Failure. With `reference`, the same command
line also runs under the real torchrun (or torch.distributed.launch) of
$PYTHON_EXEC (Debian's torch 1.13 by default) and must meet the same
expectation, with the same exit status.

Two marks keep a case honest without failing the suite:
  known:   (what, sign): a documented, deliberate difference (README); the
           case must fail with `sign` in its message or the output (a pass, or
           a failure without the sign, is reported as a failure, so the
           table is updated when the difference goes away).
  pending: (what, sign): a difference another branch removes (`what`
           names it); a failure with `sign` in its message or the output
           is XFAIL, another failure FAIL, a pass PASS.
Torch, environment and port helpers come from tests/compat/compat_test.py.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "compat"))
import compat_test  # noqa: E402
from compat_test import (PYTHON, base_env, free_port,  # noqa: E402,F401
                         torch_version, torchrun_cmd, torchrun_port_lock)
from ddprun_skip import skip_unless_ci  # noqa: E402

# Generous: a 2-core machine under a load of 10 ran some launches in 60 s.
LAUNCH_TIMEOUT_S = 180


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


class Result:
    def __init__(self, rc, out, ctx):
        self.rc, self.out, self.ctx = rc, out, ctx

    def files(self, sub="touch"):
        d = os.path.join(self.ctx.tmp, sub)
        return set(os.listdir(d)) if os.path.isdir(d) else set()


class Ctx:
    """One launch's scratch space: `tmp`, `port` (free), `touch` (the
    touch-file dir), `out` (where args_dump.py writes), `bin` (our binary
    directory)."""

    def __init__(self, bin_dir, label):
        self.tmp = tempfile.mkdtemp(prefix="ddprun_conf_%s_" % label)
        self.touch = os.path.join(self.tmp, "touch")
        self.out = os.path.join(self.tmp, "out")
        os.makedirs(self.touch)
        os.makedirs(self.out)
        self.port = free_port()
        self.bin = bin_dir
        self.label = label

    def script(self, name):
        return os.path.join(SCRIPTS, name)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path


class Case:
    """name: short id; source: 'file::test' in the peer's repository;
    argv(ctx) -> the launcher's arguments; expect(result) raises Failure;
    launcher: our binary's name; reference: run under the real tool too
    (min torch version for that tool, or None); env(ctx) -> extra
    variables; known / pending: see the module doc; needs_torch: the
    worker imports torch; same_rc=False: the exit statuses may differ
    (bad input: ddprun exits 2, torchrun 1 with a traceback; README)."""

    def __init__(self, name, source, argv, expect, launcher="ddprun",
                 reference=None, env=None, known=None, pending=None,
                 needs_torch=False, same_rc=True, timeout=LAUNCH_TIMEOUT_S):
        self.name, self.source, self.argv, self.expect = (name, source, argv,
                                                          expect)
        self.launcher, self.reference, self.env = launcher, reference, env
        self.known, self.pending, self.needs_torch = known, pending, \
            needs_torch
        self.timeout = timeout
        self.same_rc = same_rc


def launch(prefix, argvs, env, timeout, ctx):
    """Starts prefix + argv for each argv in `argvs` at once (one per node
    of a multi-node case) and waits for all: the result's rc is the first
    nonzero exit status (else 0), its output every launch's in turn."""
    procs = [subprocess.Popen(prefix + argv, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, cwd=ctx.tmp)
             for argv in argvs]
    deadline = time.monotonic() + timeout
    outs, rcs, late = [], [], False
    for p in procs:
        try:
            out = p.communicate(timeout=max(1, deadline - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0]
            late = True
        outs.append(out.decode(errors="replace"))
        rcs.append(p.returncode)
    out = "\n".join(outs)
    if late:
        raise Failure("did not finish in %d s:\n%s" % (timeout, out[-2000:]))
    return Result(next((rc for rc in rcs if rc != 0), 0), out, ctx)


def node_argvs(case, ctx):
    """The case's command line(s): argv(ctx) is one list of arguments, or a
    list of them (one launcher per node, started together)."""
    argv = case.argv(ctx)
    return argv if argv and isinstance(argv[0], list) else [argv]


def case_env(case, ctx):
    env = base_env(ctx.tmp)
    env["TEST_SENTINEL_PARENT"] = "FOOBAR"
    env["CONFORMANCE_OUT"] = ctx.out
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if case.env:
        env.update(case.env(ctx))
    return env


def underscore_spelling(argv):
    """torchrun < 2.0 knows only the underscore spelling of its flags
    (torch 2.0 added the hyphenated aliases): the same command line as a
    1.13 user types it. The cases give launcher values as --flag=value, so
    the launcher's flags end at the first word that is not one (the script,
    or -m)."""
    out = list(argv)
    for i, a in enumerate(argv):
        if not a.startswith("--"):
            break
        name, eq, value = a.partition("=")
        out[i] = "--" + name[2:].replace("-", "_") + eq + value
    return out


def run_ours(case, bin_dir):
    ctx = Ctx(bin_dir, "ours")
    try:
        r = launch([os.path.join(bin_dir, case.launcher)],
                   node_argvs(case, ctx), case_env(case, ctx), case.timeout,
                   ctx)
        try:
            case.expect(r)
        except Failure as e:
            e.output = r.out
            raise
        return r.rc
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)


def run_reference(case, bin_dir, torch):
    ctx = Ctx(bin_dir, "ref")
    try:
        env = case_env(case, ctx)
        legacy = case.launcher == "ddprun-launch"
        cmd = torchrun_cmd(ctx.tmp, None, env, legacy=legacy)
        # torchrun's static default port is 29500 (ddprun picks a free one):
        # a free default keeps parallel tests apart and yields to a flag.
        env["PET_MASTER_PORT"] = str(free_port())
        argvs = node_argvs(case, ctx)
        if torch < (2, 0):
            argvs = [underscore_spelling(a) for a in argvs]
        with torchrun_port_lock(argvs[0]):
            r = launch(cmd, argvs, env, case.timeout, ctx)
        case.expect(r)
        return r.rc
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)


def run_cases(title, cases, not_applicable, bin_dir, only=None):
    """Runs `cases` (those named in `only`, if given), prints one line per
    case and per not-applicable entry, and returns the exit status: 1 if a
    case failed, 77 / 1 (CI) if a prerequisite was missing for every case,
    else 0."""
    torch = torch_version()
    compat_test.TORCH = torch
    counts = {"PASS": 0, "FAIL": 0, "XFAIL": 0, "KNOWN": 0, "SKIP": 0}
    selected = [c for c in cases if only is None or c.name in only]
    start = time.monotonic()
    for case in selected:
        if case.needs_torch and torch is None:
            counts["SKIP"] += 1
            print("SKIP  %-34s %s: %s has no torch" %
                  (case.name, case.source, PYTHON))
            continue
        status, detail = "PASS", ""
        case_start = time.monotonic()
        try:
            rc = run_ours(case, bin_dir)
            if case.reference is not None:
                if torch is None or torch < case.reference:
                    detail = " (no reference: needs torch >= %d.%d)" % \
                        case.reference
                else:
                    ref_rc = run_reference(case, bin_dir, torch)
                    check(ref_rc == rc or not case.same_rc,
                          "exit %d, torchrun %d.%d exits %d" %
                          ((rc,) + torch + (ref_rc,)))
                    detail = " (= torchrun %d.%d, exit %d%s)" % (
                        torch + (ref_rc, "" if ref_rc == rc else
                                 "; ddprun %d: README" % rc))
            if case.known:
                status, detail = "FAIL", (
                    ": marked as a known difference (%s) but passes: drop "
                    "the mark and README's row" % case.known[0])
            elif case.pending:
                detail += " (was pending: %s; drop the mark)" % \
                    case.pending[0]
        except Failure as e:
            output = getattr(e, "output", "")
            if case.known and case.known[1] in str(e) + output:
                status, detail = "KNOWN", ": %s [%s]" % (
                    case.known[0], case.known[1])
            elif case.known:
                status, detail = "FAIL", (
                    ": a known difference (%s), but the output lacks its "
                    "sign %r: %s" % (case.known[0], case.known[1], e))
            elif case.pending and case.pending[1] in str(e) + output:
                status, detail = "XFAIL", ": pending %s [%s]" % (
                    case.pending[0], str(e).splitlines()[0][:200])
            else:
                status, detail = "FAIL", ": %s" % e
        counts[status] += 1
        print("%-5s %-34s %4.1fs %s%s" % (status, case.name,
                                          time.monotonic() - case_start,
                                          case.source, detail), flush=True)
    # The not-applicable entries of the files this selection covers.
    def file_of(source):
        return source.split("::")[0].split(" ")[0]
    files = {file_of(c.source) for c in selected}
    if selected and selected[0] is cases[0]:  # files with no case at all
        files |= {file_of(s) for s, _ in not_applicable} - {
            file_of(c.source) for c in cases}
    shown = [(s, r) for s, r in not_applicable if file_of(s) in files]
    for source, reason in shown:
        print("N/A   %s: %s" % (source, reason))
    print("%s: %d cases in %.0f s: %s; %d not applicable" %
          (title, len(selected), time.monotonic() - start,
           ", ".join("%d %s" % (n, k) for k, n in counts.items() if n),
           len(shown)))
    if counts["FAIL"]:
        return 1
    if counts["SKIP"] and counts["SKIP"] == len(selected):
        return skip_unless_ci("%s has no torch" % PYTHON)
    if counts["SKIP"] and os.environ.get("CI") in ("true", "1"):
        print("CI=true: the skipped cases are failures")
        return 1
    return 0


def main(title, cases, not_applicable, argv=None):
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True,
                        help="directory of ddprun and its alias links")
    parser.add_argument("--group", default=None,
                        help="only the cases whose name starts with one of "
                        "these comma-separated prefixes")
    parser.add_argument("--slice", default=None, metavar="K/N",
                        help="only the K-th (1-based) of N contiguous "
                        "slices of the table (ctest runs each alone)")
    parser.add_argument("cases", nargs="*", help="only these cases")
    args = parser.parse_args(argv)
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    check(not dup, "duplicate case names %s" % dup)
    only = set(args.cases) if args.cases else None
    if args.group:
        prefixes = tuple(args.group.split(","))
        only = {n for n in names if n.startswith(prefixes)} & (
            only or set(names))
    if args.slice:
        k, n = (int(x) for x in args.slice.split("/"))
        check(1 <= k <= n, "--slice %s" % args.slice)
        part = names[(k - 1) * len(names) // n:k * len(names) // n]
        only = set(part) & (only or set(names))
    unknown = (only or set()) - set(names)
    if unknown:
        print("unknown cases: %s" % " ".join(sorted(unknown)))
        return 2
    return run_cases(title, cases, not_applicable, os.path.abspath(args.bin),
                     only)
