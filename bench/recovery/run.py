#!/usr/bin/env python3
"""What a failure costs: ddprun --restart_scope failed against ddprun's own
group restart (torchrun's behaviour), measured in the same run (issue 41).

The job: ddpm_trainer on one node with 4 Gloo ranks, one stage, 2 epochs of
108 optimizer steps, a checkpoint once per epoch (--checkpoint_every 108, as
the guides save once per epoch). For each of --points kill points (a rank
and a step drawn with --seed, spread over the second epoch), the job runs
once per scope with that rank SIGKILLed when its step file counts that step.

  time lost       = the faulted run's wall time - the wall time of an
                    uninterrupted run of the same scope made right before
                    it (paired: on this shared VM the same run's time drifts
                    by seconds over minutes)
  steps redone    = the step the rank was killed at - the step the ranks
                    went on from ("healed ... at step S" of the replacement
                    under failed, "resumed from ... step S" under group)

Prints a line per run, then per scope the median time lost and steps
redone, and the ratio group / failed. Exit 1 when a run failed or, under
failed, its final model differs from the uninterrupted one (it must match
bit for bit).

--goodput SECONDS adds, per scope, one run of the same job made long enough
to last SECONDS uninterrupted (more epochs, a checkpoint per epoch) with a
random rank SIGKILLed every --kill_every seconds (30) until it ends:
  goodput = the steps' uninterrupted time (steps x the clean runs' time per
            step) / the run's wall time.

--standby runs the failed scope's agents with --standby_workers (the killed
rank is taken by the node's standby process, docs/restart_scope.md).

  bench/recovery/run.py --bin build/bin [--points 10] [--seed 1] [--nodes 2]
      [--standby]
"""
import argparse
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'tests', 'examples'))
import restart_scope_ddprun as scope_test  # noqa: E402

STEPS_PER_EPOCH = 108
HEALED_AT = re.compile(r'healed \(generation \d+\) from rank \d+ at step (\d+)')
RESUMED_AT = re.compile(r'resumed from checkpoint at step (\d+)')


def redone(text, killed_at):
    # The step file of the killed rank can lag its peers by the step they
    # committed meanwhile: never below 0.
    m = HEALED_AT.findall(text) or RESUMED_AT.findall(text)
    return max(0, killed_at - int(m[-1])) if m else None


class TimedKills:
    """A plan for scope_test.run: SIGKILL a random rank's newest process
    every `every` seconds (the first `every` seconds after the first worker
    is seen)."""
    kind = 'kill'

    def __init__(self, every, rng):
        self.every, self.rng = every, rng
        self.next_at = None
        self.kills = 0
        self.done = True

    def act(self, seen, steps_of):
        now = time.monotonic()
        ranks = [r for r in seen if isinstance(r, int)]
        if not ranks:
            return
        if self.next_at is None:
            self.next_at = now + self.every
            return
        if now < self.next_at:
            return
        self.next_at = now + self.every
        rank = self.rng.choice(sorted(ranks))
        os.kill(seen[rank][-1], signal.SIGKILL)
        self.kills += 1

    def finish(self):
        pass  # scope_test.run calls it when the run is over


def goodput(args, cmd_for, clean_step_s, scope, work):
    """One run of --goodput seconds' worth of epochs under periodic kills:
    (goodput, kills, wall seconds, exit code)."""
    epochs = max(2, math.ceil(args.goodput / (clean_step_s * STEPS_PER_EPOCH)))
    out = f'{work}/{scope}_goodput'
    os.makedirs(out)
    plan = TimedKills(args.kill_every, random.Random(args.seed))
    timeout = args.timeout
    # Long enough for the uninterrupted time three times over.
    args.timeout = max(timeout, 3 * epochs * STEPS_PER_EPOCH * clean_step_s)
    code, text, _, s = scope_test.run(
        args, cmd_for(epochs), out, plan, scope=scope,
        max_restarts=int(2 * epochs * STEPS_PER_EPOCH * clean_step_s /
                         args.kill_every) + 10)
    args.timeout = timeout
    if code != 0:
        print(text[-4000:])
    useful = epochs * STEPS_PER_EPOCH * clean_step_s
    return useful / s, plan.kills, s, code, epochs


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--bin', required=True)
    p.add_argument('--ddprun')
    p.add_argument('--points', type=int, default=10)
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--clean_runs', type=int, default=1,
                   help='uninterrupted runs per scope before the kill points '
                   '(each kill point also runs one right before it)')
    p.add_argument('--timeout', type=float, default=300)
    p.add_argument('--nodes', type=int, choices=[1, 2], default=1,
                   help='2: the 4 ranks as two agents of 2 (one hosts the '
                   'c10d rendezvous), as the issue\'s 2 x 2 job')
    p.add_argument('--goodput', type=float, default=0,
                   help='seconds: also measure goodput on a job that long '
                   '(0: not measured)')
    p.add_argument('--kill_every', type=float, default=30)
    p.add_argument('--standby', action='store_true',
                   help='the failed scope\'s agents run with '
                   '--standby_workers (a standby process takes the killed '
                   'rank)')
    args = p.parse_args()
    args.ddprun = args.ddprun or args.bin + '/ddprun'
    trainer = args.bin + '/ddpm_trainer'
    rng = random.Random(args.seed)
    points = [(rng.randrange(4), STEPS_PER_EPOCH + 1 +
               rng.randrange(STEPS_PER_EPOCH - 2))
              for _ in range(args.points)]
    work = tempfile.mkdtemp(prefix='ddprun_recovery_')
    failed_runs = 0
    try:
        data = work + '/data'
        subprocess.run([trainer, '--make_synthetic', data, '--n', '540',
                        '--synthetic_size', '16', '--seed', '9'], check=True,
                       capture_output=True, timeout=300)
        def cmd_for(epochs):
            return [trainer, '--csv_path', data + '/cases.csv', '--stages',
                    '16', '--epochs', str(epochs), '--width', '8',
                    '--gradient_accumulation_steps', '1',
                    '--checkpoint_every', str(STEPS_PER_EPOCH),
                    '--progress_interval', '1000']
        cmd = cmd_for(2)
        # A first run fills the page cache (the trainer, LibTorch, the
        # data); not counted.
        out = f'{work}/warm'
        os.makedirs(out)
        scope_test.run(args, cmd, out)
        results, goodputs = {}, {}
        scopes = ('failed', 'group')
        cleans = {scope: [] for scope in scopes}
        clean_ckpt = {}
        lost = {scope: [] for scope in scopes}
        steps = {scope: [] for scope in scopes}

        def clean_run(scope, name):
            out = f'{work}/{scope}_{name}'
            os.makedirs(out)
            code, text, _, s = scope_test.run(args, cmd, out, scope=scope)
            if code != 0:
                print(text[-4000:])
                raise SystemExit(f'FAIL {scope}: the uninterrupted run '
                                 f'exited {code}')
            cleans[scope].append(s)
            if scope not in clean_ckpt:
                clean_ckpt[scope] = scope_test.checkpoint(args, out)
            return s

        for scope in scopes:
            for k in range(args.clean_runs):
                clean_run(scope, f'clean{k}')
        for n, (rank, step) in enumerate(points):
            for scope in scopes:
                base = clean_run(scope, f'clean_before{n}')
                out = f'{work}/{scope}_{n}'
                os.makedirs(out)
                plan = scope_test.Plan('kill', step, rank)
                code, text, _, s = scope_test.run(args, cmd, out, plan,
                                                  scope=scope)
                r = redone(text, step)
                ok = code == 0 and plan.done
                same = ok and \
                    scope_test.checkpoint(args, out) == clean_ckpt[scope]
                if not ok or (scope == 'failed' and not same):
                    failed_runs += 1
                lost[scope].append(s - base)
                if r is not None:
                    steps[scope].append(r)
                print(f'  {scope} kill rank {rank} at step {step}: '
                      f'{"ok" if ok else "FAILED (exit %s)" % code}, '
                      f'lost {s - base:.2f} s ({s:.2f} s against '
                      f'{base:.2f} s just before), steps redone '
                      f'{r if r is not None else "?"}, final model '
                      f'{"equal" if same else "DIFFERENT"}', flush=True)
        for scope in scopes:
            print(f'{scope}: uninterrupted runs {statistics.median(cleans[scope]):.2f} s '
                  f'median ({", ".join("%.2f" % c for c in cleans[scope])})')
            results[scope] = (
                statistics.median(lost[scope]) if lost[scope] else None,
                statistics.median(steps[scope]) if steps[scope] else None)
            if args.goodput > 0:
                clean_s = statistics.median(cleans[scope])
                g, kills, wall, code, epochs = goodput(
                    args, cmd_for, clean_s / (2 * STEPS_PER_EPOCH), scope,
                    work)
                if code != 0:
                    failed_runs += 1
                goodputs[scope] = g
                print(f'  {scope} goodput: {100 * g:.1f} % ({epochs} epochs, '
                      f'{kills} kills every {args.kill_every:g} s, '
                      f'{wall:.1f} s wall'
                      f'{"" if code == 0 else ", FAILED (exit %s)" % code})',
                      flush=True)
        f_lost, f_steps = results['failed']
        g_lost, g_steps = results['group']
        if points:
            print(f'median time lost per failure: failed {f_lost:.2f} s, '
                  f'group {g_lost:.2f} s, ratio group/failed '
                  f'{g_lost / max(f_lost, 1e-3):.1f}x')
            print(f'median steps redone: failed {f_steps}, group {g_steps}')
        if goodputs:
            print(f'goodput with a kill every {args.kill_every:g} s: failed '
                  f'{100 * goodputs["failed"]:.1f} %, group '
                  f'{100 * goodputs["group"]:.1f} %')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed_runs else 0


if __name__ == '__main__':
    sys.exit(main())
