"""ddprun_elastic (agent/python/ddprun_elastic.py) with the torch of
/usr/bin/python3 (Debian's 1.13 here, 2.6 in the trixie leg), under the
agent stand-in tests/worker/restart_agent.cc: examples/python/elastic_gloo.py
on 4 Gloo ranks, one rank SIGKILLed at a step and replaced alone.

  python_elastic_test.py CASE --agent BIN --source SRC

heal:    rank 1 killed at step 6: the job finishes, the other ranks keep their
         processes, every rank ends with the same parameters, equal to the
         uninterrupted run's (to float rounding: a rebuilt Python DDP sums its
         first step's buckets in another order, see ddprun_elastic's doc)
source:  the same with rank 0 (the rank the others heal from) killed at step 9
drop:    tests/worker/elastic_drop_worker.py, nothing replaced: every
         survivor re-forms at once (none held by another's open group)
plain:   the script without ddprun_elastic (--plain) under restart scope
         failed, rank 2 killed at step 5, nothing replaced: the survivors fail
         their next collective and exit non-zero, none hangs
resume:  --plain --checkpoint_every 4 on 4 ranks started by hand (no
         launcher): a run of 10 steps, then one of 12 in the same folder,
         which resumes from step 8's checkpoint, ends with the parameters of
         an uninterrupted run of 12 bit for bit (the resumed DDP sums in the
         uninterrupted run's bucket layout), and the step logs name steps 9
         and 10 twice
Exit 77 (skipped) when the interpreter has no torch.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
from ddprun_skip import skip_unless_ci  # noqa: E402

RANKS = 4
STEPS = 14
# Floats all-reduced beside the model each step of a faulted run: several
# Gloo ring chunks, so when a rank dies one survivor blocks on another
# survivor, which must drop its connections for it to fail and re-form
# (else it waits for the Gloo timeout and misses the heal timeout).
EXCHANGE = 1 << 16


def run_agent(args, out, agent_args, script_args, timeout=300,
              heal_timeout=60, script=None):
    os.makedirs(out)
    if script is None:
        script = [os.path.join(args.source, "examples", "python",
                               "elastic_gloo.py"), "--steps", str(STEPS),
                  "--out", os.path.join(out, "result")]
    cmd = [args.agent, "--out", out, "--nproc", str(RANKS), "--timeout",
           str(timeout - 40), "--env",
           "PYTHONPATH=" + os.path.join(args.source, "agent", "python"),
           "--env", "DDPRUN_HEAL_TIMEOUT_S=%d" % heal_timeout] + agent_args + [
               "--", sys.executable] + script + script_args
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    text = proc.stdout.decode(errors="replace")
    logs = text
    for name in sorted(os.listdir(out)):
        if name.endswith(".out"):
            with open(os.path.join(out, name), errors="replace") as f:
                logs += "\n--- %s\n%s" % (name, f.read())
    return proc.returncode, text, logs, time.monotonic() - start


def pids(text):
    first = {int(r): int(p) for r, p in re.findall(
        r"agent: rank (\d+) pid (\d+) generation 0\b", text)}
    final = {int(r): (int(p), int(c)) for r, p, c in re.findall(
        r"agent: final rank (\d+) pid (\d+) generation \d+ exit (-?\d+)",
        text)}
    return first, final


def load(out):
    import torch
    return [torch.load(os.path.join(out, "result", "params.%d.pt" % r))
            for r in range(RANKS)]


def check(condition, what, logs):
    if not condition:
        print("FAILED: %s\n%s" % (what, logs))
        sys.exit(1)


def heal_case(args, killed, at_step):
    import torch
    work = tempfile.mkdtemp(prefix="ddprun_elastic_")
    try:
        clean = os.path.join(work, "clean")
        code, text, logs, _ = run_agent(args, clean, [], [])
        check(code == 0, "the uninterrupted run finished", logs)
        faulted = os.path.join(work, "faulted")
        code, text, logs, _ = run_agent(
            args, faulted, ["--kill", "%d@%d" % (killed, at_step)],
            ["--exchange", str(EXCHANGE)])
        check(code == 0, "the faulted run finished", logs)
        check("generation 1 healed in" in text, "generation 1 healed", logs)
        first, final = pids(text)
        for r in range(RANKS):
            check(final[r][1] == 0, "rank %d exited 0" % r, logs)
            same = final[r][0] == first[r]
            check(same == (r != killed),
                  "rank %d kept its process unless killed" % r, logs)
        mine, theirs = load(faulted), load(clean)
        for r in range(RANKS):
            check(mine[r]["steps"] == STEPS, "rank %d did every step" % r, logs)
            for a, b in zip(mine[r]["params"], mine[0]["params"]):
                check(torch.equal(a, b), "rank %d equals rank 0" % r, logs)
            for a, b in zip(mine[r]["params"], theirs[r]["params"]):
                check(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                      "rank %d equals the uninterrupted run (max diff %g)" %
                      (r, float((a - b).abs().max())), logs)
        check(abs(mine[0]["mean_loss"] - theirs[0]["mean_loss"]) < 1e-6,
              "the mean loss equals the uninterrupted run's", logs)
        print("ok: rank %d killed at step %d healed; final parameters equal "
              "the uninterrupted run's" % (killed, at_step))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def plain_case(args):
    work = tempfile.mkdtemp(prefix="ddprun_elastic_")
    try:
        out = os.path.join(work, "plain")
        code, text, logs, seconds = run_agent(
            args, out, ["--kill", "2@5", "--max_replacements", "0"],
            ["--plain"])
        check(code == 1, "the job failed (not the stand-in's timeout)", logs)
        _, final = pids(text)
        for r in (0, 1, 3):
            check(final[r][1] not in (0, 137), "rank %d exited with an error "
                  "of its own" % r, logs)
        check(seconds < 200, "no survivor hung (%.0f s)" % seconds, logs)
        print("ok: a script without ddprun_elastic fails its next collective")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def resume_case(args):
    import socket
    import torch
    script = [sys.executable, os.path.join(args.source, "examples", "python",
                                           "elastic_gloo.py"),
              "--plain", "--checkpoint_every", "4", "--record", "--width",
              "64", "--layers", "1", "--batch", "32"]
    work = tempfile.mkdtemp(prefix="ddprun_elastic_")

    def job(out, steps):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = []
        for rank in range(RANKS):
            # USE_LIBUV=0: trixie's torch 2.6 has no libuv but its TCPStore
            # asks for it (README, LibTorch versions); 1.13 ignores it.
            env = dict(os.environ, MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), RANK=str(rank),
                       LOCAL_RANK=str(rank), WORLD_SIZE=str(RANKS),
                       OMP_NUM_THREADS="1", USE_LIBUV="0")
            procs.append(subprocess.Popen(
                script + ["--steps", str(steps), "--out", out], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        logs = ""
        codes = []
        for proc in procs:
            logs += proc.communicate(timeout=300)[0].decode(errors="replace")
            codes.append(proc.returncode)
        check(codes == [0] * RANKS, "every rank exited 0 (%s)" % codes, logs)
        return logs

    try:
        clean, resumed = os.path.join(work, "clean"), os.path.join(work, "r")
        job(clean, 12)
        job(resumed, 10)
        logs = job(resumed, 12)
        check(logs.count("resumed from checkpoint at step 8") == RANKS,
              "every rank resumed from step 8", logs)
        for r in range(RANKS):
            with open(os.path.join(resumed, "steps.%d.log" % r)) as f:
                steps = [int(line) for line in f]
            check(steps == list(range(1, 11)) + list(range(9, 13)),
                  "rank %d's step log: %s" % (r, steps), logs)
            a = torch.load(os.path.join(clean, "params.%d.pt" % r))
            b = torch.load(os.path.join(resumed, "params.%d.pt" % r))
            for x, y in zip(a["params"], b["params"]):
                check(torch.equal(x, y), "rank %d equals the uninterrupted "
                      "run bit for bit (max diff %g)" % (
                          r, float((x - y).abs().max())), logs)
        print("ok: --plain --checkpoint_every resumed from step 8 and ended "
              "as the uninterrupted run, bit for bit")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def drop_case(args):
    """tests/worker/elastic_drop_worker.py: rank 1 dies while the others are
    inside a 256 KiB all-reduce, nothing is replaced; every survivor must
    give up within one heal timeout of the others (a survivor that kept its
    failed group's connections open while re-forming held a peer blocked on
    it for a whole heal timeout: seen in the torch 2.6 leg)."""
    heal_timeout = 15
    work = tempfile.mkdtemp(prefix="ddprun_elastic_")
    try:
        out = os.path.join(work, "drop")
        script = [os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "elastic_drop_worker.py")]
        code, text, logs, _ = run_agent(
            args, out, ["--max_replacements", "0"], [], timeout=200,
            heal_timeout=heal_timeout, script=script)
        check(code == 1, "the job failed (not the stand-in's timeout)", logs)
        gave_up = {int(r): float(t) for r, t in re.findall(
            r"^rank (\d+) gave up at ([0-9.]+):", logs, re.M)}
        check(sorted(gave_up) == [0, 2, 3],
              "ranks 0, 2 and 3 gave up (%s)" % sorted(gave_up), logs)
        spread = max(gave_up.values()) - min(gave_up.values())
        check(spread < heal_timeout / 2,
              "the survivors gave up within %.1f s of each other, not one "
              "heal timeout (%d s) apart" % (spread, heal_timeout), logs)
        print("ok: every survivor re-formed at once (gave up %.1f s apart)"
              % spread)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ddprun_case(args):
    """The example under ddprun itself (--restart_scope failed, not the
    stand-in), two agents (nodes) of two ranks with
    DDPRUN_GENERATION_SIGNAL=SIGUSR1. "faulted": rank 2 killed at step 10
    heals; "spare": node 1 (ranks 2 and 3) killed whole at step 10 while a
    third agent waits, which takes its place. Each time the other ranks keep
    their processes, the parameters end as the uninterrupted run's, and every
    survivor got the signal once (the other node's through the rendezvous's
    heartbeats), a replacement none."""
    import torch
    sys.path.insert(0, os.path.join(args.source, "tests", "examples"))
    import restart_scope_ddprun as ddp  # noqa: E402
    os.environ["PYTHONPATH"] = os.path.join(args.source, "agent", "python")
    os.environ["DDPRUN_HEAL_TIMEOUT_S"] = "60"
    os.environ["DDPRUN_GENERATION_SIGNAL"] = "SIGUSR1"
    run_args = argparse.Namespace(ddprun=args.ddprun, timeout=240, nodes=2)
    # More steps than the other cases: the kills at step 10 wait for the
    # spare to park (a second or more under load), and a job that ended
    # meanwhile would have nothing left to heal.
    steps = 30
    script = os.path.join(args.source, "examples", "python", "elastic_gloo.py")
    work = tempfile.mkdtemp(prefix="ddprun_elastic_")
    try:
        results = {}
        runs = (("clean", None, set()),
                ("faulted", ddp.Plan("kill", 10, 2), {2}),
                ("spare", ddp.Plan("spare", 10), {2, 3}))
        for name, plan, _ in runs:
            out = os.path.join(work, name)
            os.makedirs(out)
            code, text, seen, _ = ddp.run(
                run_args, [sys.executable, script, "--steps", str(steps),
                           "--out", os.path.join(out, "result")],
                out, plan, output_flag=None)
            check(code == 0, "the %s run finished" % name, text)
            results[name] = (load(out), text, seen)
        theirs = results["clean"][0]
        for r in range(RANKS):
            check(theirs[r]["notices"] == 0,
                  "rank %d got no signal in the uninterrupted run" % r,
                  results["clean"][1])
        for name, _, replaced in runs[1:]:
            mine, text, seen = results[name]
            healed = (ddp.HEALED.findall(text) if len(replaced) == 1 else
                      ddp.HEALED_NODE.findall(text))
            check(len(healed) == 1, "%s: one heal line (%s)" % (name, healed),
                  text)
            for r in range(RANKS):
                check(len(seen.get(r, [])) == (2 if r in replaced else 1),
                      "%s: rank %d ran as pids %s" % (name, r, seen.get(r)),
                      text)
                check(mine[r]["steps"] == steps,
                      "%s: rank %d did every step" % (name, r), text)
                notices = 0 if r in replaced else 1
                check(mine[r]["notices"] == notices,
                      "%s: rank %d got %d generation signal(s), not %d (the "
                      "store's node ran ranks %s)" % (
                          name, r, mine[r]["notices"], notices,
                          sorted(seen.get("store_node_ranks", []))), text)
                for a, b in zip(mine[r]["params"], theirs[r]["params"]):
                    check(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
                          "%s: rank %d equals the uninterrupted run (max diff "
                          "%g)" % (name, r, float((a - b).abs().max())), text)
        print("ok: under ddprun --restart_scope failed on 2 nodes rank 2 "
              "healed, and node 1's ranks healed on a spare; final "
              "parameters equal the uninterrupted run's; each survivor got "
              "the generation signal once")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case",
                        choices=["heal", "source", "plain", "drop", "ddprun",
                                 "resume"])
    parser.add_argument("--agent", required=True)
    parser.add_argument("--ddprun")
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as error:
        return skip_unless_ci("%s has no torch (%s)" % (sys.executable, error))
    if args.case == "heal":
        return heal_case(args, 1, 6)
    if args.case == "source":
        return heal_case(args, 0, 9)
    if args.case == "ddprun":
        return ddprun_case(args)
    if args.case == "drop":
        return drop_case(args)
    if args.case == "resume":
        return resume_case(args)
    return plain_case(args)


if __name__ == "__main__":
    sys.exit(main())
