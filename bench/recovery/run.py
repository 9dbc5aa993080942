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
bit for bit) or a rank other than the killed one ran in a new process (the
others keep their pids).

--goodput SECONDS adds, per scope, one run of the same job made long enough
to last SECONDS uninterrupted (more epochs, a checkpoint per epoch) with a
random rank SIGKILLed every --kill_every seconds (30) until it ends:
  goodput = the steps' uninterrupted time (steps x the clean runs' time per
            step) / the run's wall time.

--standby runs the failed scope's agents with --standby_workers (the killed
rank is taken by the node's standby process, docs/restart_scope.md).

  bench/recovery/run.py --bin build/bin [--points 10] [--seed 1] [--nodes 2]
      [--standby]

--trainer python: the same method on examples/python/elastic_gloo.py (4
Gloo ranks, --steps 150 of an MLP with two 128 x 128 hidden layers, 256
samples per rank per step) under three launchers: ddprun --restart_scope
failed (the script with ddprun_elastic: the killed rank heals from a live
peer), ddprun --restart_scope group and torchrun 1.13 (python3 -m
torch.distributed.run, the same c10d flags; both run the script --plain
--checkpoint_every 50: every worker restarts and resumes from rank 0's
newest checkpoint). Kill points: any step but the last. Steps redone: the
most steps a rank's step log (--record) names twice. Final model: bit for
bit under group and torchrun; under failed to float rounding (rtol 1e-5,
atol 1e-6: ddprun_elastic's rebuilt DDP sums its first step after a heal in
another bucket layout, its doc), else the run counts as failed. Ratios:
torchrun / failed and group / failed. torchrun 1.13 under Python 3.11 needs
<shared>/reference/torchrun_py311_fix.py (bench/launcher's fix, loaded as
the torchrun agent's sitecustomize). Only ddprun is needed:

  bench/recovery/run.py --trainer python --ddprun build-agent/bin/ddprun \
      --nodes 2 [--points 10] [--steps 150] [--checkpoint_every 50]
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


class DdpmJob:
    """ddpm_trainer, 2 epochs of STEPS_PER_EPOCH steps, a checkpoint per
    epoch; scopes failed and group of ddprun."""
    scopes = ('failed', 'group')

    def __init__(self, args, work):
        self.args, self.work = args, work
        self.trainer = args.bin + '/ddpm_trainer'
        self.clean_ckpt = {}  # the uninterrupted runs' checkpoints
        self.data = work + '/data'
        subprocess.run([self.trainer, '--make_synthetic', self.data, '--n',
                        '540', '--synthetic_size', '16', '--seed', '9'],
                       check=True, capture_output=True, timeout=300)

    def points(self, rng):
        return [(rng.randrange(4), STEPS_PER_EPOCH + 1 +
                 rng.randrange(STEPS_PER_EPOCH - 2))
                for _ in range(self.args.points)]

    def cmd_for(self, epochs):
        return [self.trainer, '--csv_path', self.data + '/cases.csv',
                '--stages', '16', '--epochs', str(epochs), '--width', '8',
                '--gradient_accumulation_steps', '1',
                '--checkpoint_every', str(STEPS_PER_EPOCH),
                '--progress_interval', '1000']

    def run(self, scope, out, plan=None):
        code, text, seen, s = scope_test.run(self.args, self.cmd_for(2), out,
                                             plan, scope=scope)
        return code, text, s, seen

    def model(self, scope, out, clean_out):
        """(verdict, acceptable): the final checkpoint against the
        uninterrupted run's; under failed it must be equal."""
        if clean_out not in self.clean_ckpt:
            self.clean_ckpt[clean_out] = scope_test.checkpoint(self.args,
                                                               clean_out)
        same = scope_test.checkpoint(self.args, out) == \
            self.clean_ckpt[clean_out]
        return ('equal' if same else 'DIFFERENT'), same or scope != 'failed'

    def redone(self, out, text, killed_at):
        return redone(text, killed_at)


PY_SCRIPT = os.path.normpath(os.path.join(
    HERE, '..', '..', 'examples', 'python', 'elastic_gloo.py'))
# The Python twin's model: real compute per step (two 128 x 128 hidden
# layers, 256 samples per rank), one DDP bucket.
PY_MODEL = ['--width', '128', '--layers', '2', '--batch', '256']


class PythonJob:
    """examples/python/elastic_gloo.py, --steps steps: under ddprun failed
    with ddprun_elastic (heals from a live peer); under ddprun group and
    torchrun as --plain --checkpoint_every (a restart resumes from rank 0's
    newest checkpoint). Steps redone: from the ranks' step logs (--record)."""
    scopes = ('failed', 'group', 'torchrun')

    def __init__(self, args, work):
        self.args, self.work = args, work
        r = subprocess.run([args.python, '-c', 'import torch.distributed.run'],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit(f'{args.python} has no torch.distributed.run '
                             f'(torchrun): {r.stderr.strip()[-500:]}')
        # Debian's torchrun 1.13 under Python 3.11 fails every start
        # (Std.from_str returns None for "0"): the shared fix, as
        # bench/launcher applies it, as the torchrun agent's sitecustomize.
        fix = os.path.join(args.shared, 'reference', 'torchrun_py311_fix.py')
        if not os.path.exists(fix):
            raise SystemExit(f'no {fix} (--shared or DDPRUN_SHARED_DIR: the '
                             'folder with reference/torchrun_py311_fix.py)')
        self.fix_dir = os.path.join(work, 'sitecustomize')
        os.makedirs(self.fix_dir)
        shutil.copy(fix, os.path.join(self.fix_dir, 'sitecustomize.py'))

    def points(self, rng):
        # Any step but the last: a kill before the first checkpoint costs a
        # restart-everything launcher every step since the start.
        return [(rng.randrange(4), 1 + rng.randrange(self.args.steps - 1))
                for _ in range(self.args.points)]

    def run(self, scope, out, plan=None):
        cmd = [self.args.python, PY_SCRIPT, '--steps', str(self.args.steps),
               '--out', out + '/result', '--record'] + PY_MODEL
        agent = None
        if scope != 'failed':
            cmd += ['--plain', '--checkpoint_every',
                    str(self.args.checkpoint_every)]
        if scope == 'torchrun':
            agent = [self.args.python, '-m', 'torch.distributed.run']
        saved = os.environ.get('PYTHONPATH')
        if scope == 'torchrun':
            os.environ['PYTHONPATH'] = self.fix_dir
        try:
            code, text, seen, s = scope_test.run(
                self.args, cmd, out, plan,
                scope=None if scope == 'torchrun' else scope,
                output_flag=None, agent=agent,
                steps=lambda rank: last_step(out, rank))
        finally:
            if saved is None:
                os.environ.pop('PYTHONPATH', None)
            else:
                os.environ['PYTHONPATH'] = saved
        return code, text, s, seen

    def model(self, scope, out, clean_out):
        """(verdict, acceptable): every rank's final parameters against the
        uninterrupted run's. group and torchrun resume exactly (the script
        restores DDP's bucket layout too): bit for bit. Under failed
        ddprun_elastic's rebuilt DDP sums the first step after a heal in
        another bucket layout (its doc): equal to float rounding (rtol
        1e-5, atol 1e-6, as tests/worker/python_elastic_test.py)."""
        if digests(out) == digests(clean_out) and None not in digests(out):
            return 'equal', True
        # Not bit for bit: how far, with the interpreter that has torch.
        r = subprocess.run([self.args.python, '-c', PARAMS_DIFF, out + '/result',
                            clean_out + '/result', str(scope_test.RANKS)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return f'DIFFERENT (not compared: {r.stderr.strip()[-300:]})', False
        diff, close = r.stdout.split()
        if close == 'True' and scope == 'failed':
            return f'equal to float rounding (max diff {float(diff):.2g})', True
        return f'DIFFERENT (max diff {float(diff):.2g})', False

    def redone(self, out, text, killed_at):
        """The most steps a rank committed more than once (its step log
        names a step twice)."""
        most = 0
        for rank in range(scope_test.RANKS):
            steps = step_log(out, rank)
            if sorted(set(steps)) != list(range(1, self.args.steps + 1)):
                return None  # a step never committed: not a finished run
            most = max(most, len(steps) - len(set(steps)))
        return most



# argv: two result folders and the rank count; prints the largest absolute
# difference of their params.<rank>.pt and whether every tensor is close.
PARAMS_DIFF = '''
import sys, torch
mine, theirs, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
diff, close = 0.0, True
for r in range(ranks):
    a = torch.load("%s/params.%d.pt" % (mine, r))["params"]
    b = torch.load("%s/params.%d.pt" % (theirs, r))["params"]
    for x, y in zip(a, b):
        diff = max(diff, float((x - y).abs().max()))
        close = close and torch.allclose(x, y, rtol=1e-5, atol=1e-6)
print(diff, close)
'''


def digests(out):
    found = []
    for rank in range(scope_test.RANKS):
        try:
            with open(f'{out}/result/params.{rank}.sha256') as f:
                found.append(f.read().strip())
        except OSError:
            found.append(None)
    return found


def step_log(out, rank):
    try:
        with open(f'{out}/result/steps.{rank}.log') as f:
            return [int(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def last_step(out, rank):
    steps = step_log(out, rank)
    return steps[-1] if steps else -1


def ratio(value, base):
    """value / base, or why not (failed's median is not above 0)."""
    if value is None or base is None:
        return 'n/a (no value)'
    if base <= 0:
        return f'n/a (failed {base:.3g})'
    return f'{value / base:.1f}x'


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--trainer', choices=['ddpm', 'python'], default='ddpm',
                   help='ddpm: ddpm_trainer under ddprun failed and group; '
                   'python: examples/python/elastic_gloo.py under ddprun '
                   'failed, group and torchrun')
    p.add_argument('--bin', help='the build\'s bin folder (ddpm_trainer, '
                   'worker_rank_helper, ddprun); --trainer python needs '
                   'only ddprun (--ddprun or --bin)')
    p.add_argument('--ddprun')
    p.add_argument('--python', default='/usr/bin/python3',
                   help='--trainer python: the interpreter with torch')
    p.add_argument('--steps', type=int, default=150,
                   help='--trainer python: steps of a run')
    p.add_argument('--checkpoint_every', type=int, default=50,
                   help='--trainer python: the group and torchrun runs\' '
                   'checkpoint period in steps')
    p.add_argument('--shared', default=os.environ.get(
        'DDPRUN_SHARED_DIR', os.path.join(HERE, '..', '..', '..', 'shared')),
                   help='--trainer python: the folder with '
                   'reference/torchrun_py311_fix.py')
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
                   '(0: not measured; --trainer ddpm)')
    p.add_argument('--kill_every', type=float, default=30)
    p.add_argument('--standby', action='store_true',
                   help='the failed scope\'s agents run with '
                   '--standby_workers (a standby process takes the killed '
                   'rank)')
    p.add_argument('--keep', action='store_true',
                   help='keep the runs\' folders (printed) for a look')
    args = p.parse_args()
    if args.trainer == 'ddpm' and not args.bin:
        p.error('--trainer ddpm needs --bin')
    if args.trainer == 'python':
        if not (args.ddprun or args.bin):
            p.error('--trainer python needs --ddprun or --bin')
        if args.goodput:
            p.error('--goodput is measured for --trainer ddpm only')
        if args.standby:
            p.error('--standby is for --trainer ddpm (ddprun keeps no '
                    'standby for a Python script)')
        if args.steps < 2 or not 1 <= args.checkpoint_every < args.steps:
            p.error('--steps must be at least 2 and --checkpoint_every '
                    'between 1 and --steps - 1')
    if args.points < 0 or args.clean_runs < 1 or args.timeout <= 0:
        p.error('--points must not be negative, --clean_runs at least 1, '
                '--timeout above 0')
    args.ddprun = args.ddprun or args.bin + '/ddprun'
    if not os.access(args.ddprun, os.X_OK):
        p.error(f'no ddprun at {args.ddprun}')
    work = tempfile.mkdtemp(prefix='ddprun_recovery_')
    failed_runs = 0
    try:
        job = (PythonJob if args.trainer == 'python' else DdpmJob)(args, work)
        points = job.points(random.Random(args.seed))
        scopes = job.scopes
        # A first run fills the page cache (the trainer or torch, the
        # data); not counted.
        out = f'{work}/warm'
        os.makedirs(out)
        job.run(scopes[0], out)
        results, goodputs = {}, {}
        cleans = {scope: [] for scope in scopes}
        clean_out = {}  # scope -> its first uninterrupted run's folder
        lost = {scope: [] for scope in scopes}
        steps = {scope: [] for scope in scopes}

        def clean_run(scope, name):
            out = f'{work}/{scope}_{name}'
            os.makedirs(out)
            code, text, s, _ = job.run(scope, out)
            if code != 0:
                print(text[-4000:])
                raise SystemExit(f'FAIL {scope}: the uninterrupted run '
                                 f'exited {code}')
            cleans[scope].append(s)
            clean_out.setdefault(scope, out)
            return s

        for scope in scopes:
            for k in range(args.clean_runs):
                clean_run(scope, f'clean{k}')
        width = max(map(len, scopes))
        for n, (rank, step) in enumerate(points):
            for scope in scopes:
                base = clean_run(scope, f'clean_before{n}')
                out = f'{work}/{scope}_{n}'
                os.makedirs(out)
                plan = scope_test.Plan('kill', step, rank)
                code, text, s, seen = job.run(scope, out, plan)
                r = job.redone(out, text, step)
                ok = code == 0 and plan.done
                alone = ''
                if ok and scope == 'failed':
                    # The check: the other ranks kept their
                    # processes; only the killed one ran twice.
                    problems = scope_test.not_replaced_alone(seen, rank)
                    ok = not problems
                    alone = (', the others kept their pids' if ok else
                             ', NOT REPLACED ALONE: ' + '; '.join(problems))
                model, fine = job.model(scope, out, clean_out[scope]) \
                    if ok else ('not compared', False)
                if not (ok and fine):
                    failed_runs += 1
                lost[scope].append(s - base)
                if r is not None:
                    steps[scope].append(r)
                print(f'  {scope:<{width}} kill rank {rank} at step {step}: '
                      f'{"ok" if ok else "FAILED (exit %s)" % code}, '
                      f'lost {s - base:.2f} s ({s:.2f} s against '
                      f'{base:.2f} s just before), steps redone '
                      f'{r if r is not None else "?"}, final model '
                      f'{model}{alone}', flush=True)
                if not ok:
                    print(text[-4000:])
        for scope in scopes:
            print(f'{scope}: uninterrupted runs {statistics.median(cleans[scope]):.2f} s '
                  f'median ({", ".join("%.2f" % c for c in cleans[scope])})')
            results[scope] = (
                statistics.median(lost[scope]) if lost[scope] else None,
                statistics.median(steps[scope]) if steps[scope] else None)
            if args.goodput > 0:
                clean_s = statistics.median(cleans[scope])
                g, kills, wall, code, epochs = goodput(
                    args, job.cmd_for, clean_s / (2 * STEPS_PER_EPOCH),
                    scope, work)
                if code != 0:
                    failed_runs += 1
                goodputs[scope] = g
                print(f'  {scope} goodput: {100 * g:.1f} % ({epochs} epochs, '
                      f'{kills} kills every {args.kill_every:g} s, '
                      f'{wall:.1f} s wall'
                      f'{"" if code == 0 else ", FAILED (exit %s)" % code})',
                      flush=True)
        f_lost, f_steps = results['failed']
        others = scopes[1:]
        if points:
            print('median time lost per failure: ' + ', '.join(
                f'{scope} {results[scope][0]:.2f} s' for scope in scopes) +
                  ', ' + ', '.join(
                f'ratio {scope}/failed {ratio(results[scope][0], f_lost)}'
                for scope in others))
            print('median steps redone: ' + ', '.join(
                f'{scope} {results[scope][1]}' for scope in scopes) + ', ' +
                  ', '.join(
                f'ratio {scope}/failed {ratio(results[scope][1], f_steps)}'
                for scope in others))
        if goodputs:
            print(f'goodput with a kill every {args.kill_every:g} s: failed '
                  f'{100 * goodputs["failed"]:.1f} %, group '
                  f'{100 * goodputs["group"]:.1f} %')
    finally:
        if args.keep:
            print(f'the runs\' folders: {work}')
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed_runs else 0


if __name__ == '__main__':
    sys.exit(main())
