#!/usr/bin/env python3
"""ddprun --restart_scope failed with a real trainer on one node (issue 41).

Runs `ddprun --standalone --nproc_per_node 4 --restart_scope failed` on a
trainer once uninterrupted, then once per kill point RANK@STEP: SIGKILL of
that rank's process once its step file counts STEP. Every time: ddprun
exits 0, the killed rank ran in two processes and every other rank in one
(its pid unchanged), the console says
"[ddprun] rank R replaced (generation 1): healed from rank S in X s", and
metrics.jsonl and the final checkpoint equal the uninterrupted run's (timings
aside). Prints one line per run with the heal time and the wall time.

--nodes 2 runs the same 4 ranks as two ddprun agents on this host (2 x 2
ranks, the first hosting the c10d rendezvous): a rank of the node that does
not serve the workers' store (group rank 1's) is replaced through the
store of the node that does, and a group restart resumes bit for bit too
(the checkpoint keeps DDP's gradient buckets: over Gloo's ring their layout
decides how the sums round).

Chaos cases (--chaos KIND@STEP), each ending in a finished job equal to the
uninterrupted one: "two" kills ranks 1 and 2 at once (the group restarts
from its checkpoint), "heal" kills rank 1 and then, as soon as it was
replaced, rank 2 (a second failure while healing: the group restarts; in
these two the interrupted epoch's train_loss averages the steps since the
checkpoint, as under --restart_scope group, and is not compared),
"stop" SIGSTOPs rank 1 (ddprun's --watchdog_timeout kills it and it is
replaced alone), "write" SIGKILLs rank 0 while it writes a checkpoint (the
first write from step STEP on whose temporary file the kill leaves behind:
the write was cut; it is replaced alone, the save is done again and the
leftover removed), "node" (with --nodes 2) SIGKILLs the second agent and
its workers at once, the whole node (its runs use --nnodes 1:2 and
--heal_timeout 10, and no node joins: the lost node's place stays open 5 s,
then the surviving node restarts alone from the checkpoint with the
smaller world, and the job ends with world_size 2 instead of 4), "spare"
(with --nodes 2) kills node 1 (group rank 1) whole while a third agent
waits as a spare: the spare takes its place in the running round
(JobConfig.replace_lost_nodes), its ranks 2 and 3 heal from rank 0, node
0's workers keep their processes, and the job ends equal to the
uninterrupted run. "rejoin" (with --nodes 2) is "spare" with the third
agent started only once the rendezvous said that node 1's place stays open
(JobConfig.replace_wait_ms): a node that joins after the loss, or the lost
machine's agent started again.

--sweep N adds N kill points spread over the whole uninterrupted run: steps
1 to its last step but one, evenly apart, ranks 0 to 3 in turn (with
--nodes 2 both nodes', the store's and the other), each checked as a --kill
is (the issue's "every one of the 10 kill points").

--standby runs every agent with --standby_workers: each kill's rank must be
taken over by the node's standby process (a child of the agent started
with DDPRUN_STANDBY_FD, seen waiting before the kill), which the console
names ("[ddprun] rank R replaced (generation G) by the standby worker pid
N, X s after its failure"), and the job must still end equal to the
uninterrupted run. Each PASS line then also gives the time from the
failure to the replacement's start.

  restart_scope_ddprun.py --bin DIR --trainer survival|ddpm [--kill R@S]...
      [--chaos two|heal|stop|write|node|spare|rejoin@S]... [--sweep N]
      [--nodes 1|2] [--env KEY=VALUE]... [--standby]
"""
import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import select
import struct
import tempfile
import threading
import time

RANKS = 4
TRAINERS = {
    'survival': (
        '--n 96 --synthetic_size 16 --seed 3', 'survival.csv',
        '--image_size 16 16 16 --progress_interval 1 --batch_size 8 '
        '--epochs 3 --checkpoint_every 5'),
    'ddpm': (
        '--n 12 --synthetic_size 16 --seed 9', 'cases.csv',
        '--stages 8,12 --epochs 2 --gradient_accumulation_steps 1 --width 4 '
        '--v_parameterization --progress_interval 1 --checkpoint_every 3'),
}
HEALED = re.compile(r'\[ddprun\] rank (\d+) replaced \(generation (\d+)\): '
                    r'healed from rank (\d+) in ([0-9.]+) s')
BY_STANDBY = re.compile(r'\[ddprun\] rank (\d+) replaced \(generation (\d+)\) '
                        r'by the standby worker pid (\d+), ([0-9.]+) s after '
                        r'its failure')
STARTED_AGAIN = re.compile(r'rank (\d+) started again alone \(generation '
                           r'(\d+), pid (\d+), ([0-9.]+) s after its failure')
HEALED_NODE = re.compile(r'\[ddprun\] ranks (\d+)-(\d+) replaced \(generation '
                         r'(\d+)\): healed from rank (\d+) in ([0-9.]+) s')


def children_of(agent_pid):
    """(pid, initial environment) of each of the agent's child processes."""
    for stat in glob.glob('/proc/[0-9]*/stat'):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            if int(fields[1]) != agent_pid:
                continue
            pid = int(stat.split('/')[2])
            with open(f'/proc/{pid}/environ', 'rb') as f:
                env = dict(kv.split(b'=', 1) for kv in f.read().split(b'\0')
                           if b'=' in kv)
        except (OSError, IndexError, ValueError):
            continue
        yield pid, env


def workers_of(agent_pid, local_ranks=None):
    """{rank: pid} of the agent's child processes that have a RANK (their
    LOCAL_RANK into `local_ranks` when given)."""
    found = {}
    for pid, env in children_of(agent_pid):
        if b'RANK' not in env:
            continue
        try:
            found[int(env[b'RANK'])] = pid
            if local_ranks is not None:
                local_ranks[int(env[b'RANK'])] = (
                    int(env[b'LOCAL_RANK']), int(env[b'GROUP_RANK']))
        except (KeyError, ValueError):
            continue
    return found


def standbys_of(agent_pid):
    """Pids of the agent's child processes started as standby workers
    (their initial environment has DDPRUN_STANDBY_FD)."""
    return {pid for pid, env in children_of(agent_pid)
            if b'DDPRUN_STANDBY_FD' in env}


def sweep_points(count, last_step, ranks=RANKS):
    """`count` (rank, step) kill points: steps from 1 to last_step - 1 (a
    kill at the last step can land after the job's end), evenly apart and
    rising, ranks 0..ranks-1 in turn. Fewer steps than points repeat steps,
    on other ranks."""
    if count <= 0:
        return []
    span = max(last_step - 1, 1)
    return [(n % ranks, 1 + (n * span) // count) for n in range(count)]


def step_count(path):
    """The steps a rank's step file counts; -1 when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.readline().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def last_step_of(out):
    """The most steps any rank's step file of the run in `out` counts."""
    return max((step_count(path) for path in
                glob.glob(f'{out}/logs*/*/attempt_0/*/steps')), default=-1)


def steps_of(log_dir, rank):
    for path in glob.glob(f'{log_dir}/*/attempt_0/{rank}/steps'):
        return step_count(path)
    return -1


def not_replaced_alone(seen, rank):
    """What is wrong unless `rank` ran in two processes and every other rank
    in one (its pid kept): [] when it was replaced alone."""
    problems = []
    for r in range(RANKS):
        want = 2 if r == rank else 1
        if len(seen.get(r, [])) != want:
            problems.append(f'rank {r} ran as pids {seen.get(r)} '
                            f'(expected {want} process(es))')
    return problems


class WriteKiller:
    """SIGKILLs each process that starts writing a checkpoint into `folder`
    (a file named *.pt.tmp.<pid>, common/file_util.cc), watched with
    inotify from a thread of its own (a small checkpoint is written in
    milliseconds), until one kill leaves its temporary file behind: that
    write was cut short. `landed` is then that file's name."""
    IN_CREATE = 0x100

    def __init__(self, folder):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if self.fd < 0 or libc.inotify_add_watch(
                self.fd, folder.encode(), self.IN_CREATE) < 0:
            raise OSError(ctypes.get_errno(), f'inotify on {folder}')
        self.folder, self.landed, self.kills = folder, None, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop.is_set() and self.landed is None:
            if not select.select([self.fd], [], [], 0.1)[0]:
                continue
            data = os.read(self.fd, 65536)
            while data:
                _, _, _, size = struct.unpack_from('iIII', data)
                name = data[16:16 + size].split(b'\0')[0].decode()
                data = data[16 + size:]
                m = re.search(r'\.pt\.tmp\.(\d+)$', name)
                if not m:
                    continue
                try:
                    os.kill(int(m.group(1)), signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.kills += 1
                if os.path.exists(os.path.join(self.folder, name)):
                    self.landed = name
                    return

    def close(self):
        self.stop.set()
        self.thread.join(5)
        os.close(self.fd)


class Plan:
    """What a run does to its workers: `kind` kill (rank at step), two,
    heal, stop or write (rank 1's step counts `step`, rank 0's for write;
    see the module's text). `out` is the run's output folder."""

    def __init__(self, kind, step, rank=1):
        if kind == 'write':
            rank = 0  # the rank that writes the checkpoints
        self.kind, self.step, self.rank = kind, step, rank
        self.done = False
        self.armed = False  # heal: rank 1 was killed, rank 2 is next
        self.out = None
        self.writes = None  # write: the WriteKiller once armed
        self.agents = []  # node, spare, rejoin: the run's agents, by node
        self.spare_since = None  # spare: when the spare agent started

    def finish(self):
        if self.writes is not None:
            self.writes.close()

    def act(self, seen, steps_of):
        if self.done:
            return
        if self.writes is not None:
            self.done = self.writes.landed is not None
            return
        if self.armed:
            if len(seen.get(1, [])) >= 2:  # rank 1's replacement started
                os.kill(seen[2][-1], signal.SIGKILL)
                self.done = True
            return
        if self.rank not in seen or steps_of(self.rank) < self.step:
            return
        if self.kind == 'spare' and (self.spare_since is None or
                                     time.monotonic() - self.spare_since < 1):
            return  # the spare has not parked yet
        pid = seen[self.rank][-1]
        if self.kind == 'kill':
            os.kill(pid, signal.SIGKILL)
            self.done = True
        elif self.kind == 'two':
            os.kill(pid, signal.SIGKILL)
            os.kill(seen[2][-1], signal.SIGKILL)
            self.done = True
        elif self.kind == 'heal':
            os.kill(pid, signal.SIGKILL)
            self.armed = True
        elif self.kind == 'stop':
            os.kill(pid, signal.SIGSTOP)
            self.done = True
        elif self.kind == 'write':
            self.writes = WriteKiller(self.out + '/checkpoints')
        elif self.kind in WHOLE_NODE:
            # The agent and its workers at once, as a machine that dies.
            agent = self.agents[1]
            victims = [agent.pid] + list(workers_of(agent.pid).values())
            for victim in victims:
                os.kill(victim, signal.SIGKILL)
            self.done = True


# Chaos kinds that kill node 1 whole.
WHOLE_NODE = ('node', 'spare', 'rejoin')
# Node 0's console says so when node 1's place stays open (rendezvous_job).
PLACE_OPEN = re.compile(r"the place of node '[^']+' \(ranks 2-3\) stays open")


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run(args, trainer_cmd, out, plan=None, scope='failed',
        output_flag='--output_dir', max_restarts=3, agent=None, steps=None):
    """One ddprun run (one agent per node); returns (exit code, console,
    pids seen per rank, seconds). `agent`: another launcher that takes
    ddprun's flags but --restart_scope (torchrun: its command, and scope
    None); `steps`: rank -> the steps it counted, for the plan (default:
    ddprun's step files)."""
    nodes = getattr(args, 'nodes', 1)
    if nodes == 1:
        placements = [['--standalone', f'--nproc_per_node={RANKS}']]
    else:
        endpoint = f'127.0.0.1:{free_port()}'
        nnodes = '1:2' if plan is not None and plan.kind == 'node' else nodes
        common = [f'--nnodes={nnodes}', f'--nproc_per_node={RANKS // nodes}',
                  '--rdzv_backend=c10d', '--rdzv_id=scope',
                  f'--rdzv_endpoint={endpoint}']
        placements = [common + [f'--rdzv_conf=is_host={str(n == 0).lower()}']
                      for n in range(nodes)]
        if plan is not None and plan.kind in WHOLE_NODE:
            # Node 1 (group rank 1) dies; node 0 keeps group rank 0: its
            # agent serves the store (losing it ends the round at once).
            placements = [p + [f'--node_rank={n}']
                          for n, p in enumerate(placements)]
        if plan is not None and plan.kind in ('spare', 'rejoin'):
            # A third agent takes node 1's place (waiting, or started once
            # the place is open).
            placements.append(common + ['--rdzv_conf=is_host=false'])
    env = dict(os.environ, OMP_NUM_THREADS='1')
    if plan is not None:
        plan.out = out
    start = time.monotonic()
    agents, consoles, log_dirs = [], [], []
    pending = []  # (cmd, console) of the third agent, started later
    for n, placement in enumerate(placements):
        log_dir = out + ('/logs' if nodes == 1 else f'/logs{n}')
        cmd = (agent or [args.ddprun]) + placement + (
            ['--restart_scope', scope] if scope else []) + [
            '--max_restarts', str(max_restarts),
            '--log_dir', log_dir, '--no_python']
        if getattr(args, 'standby', False) and scope == 'failed':
            cmd.append('--standby_workers')
        if plan is not None and plan.kind == 'stop':
            cmd += ['--watchdog_timeout', '3']
        if plan is not None and plan.kind == 'node':
            # Half of it is how long the lost node's place stays open.
            cmd += ['--heal_timeout', '10']
        cmd += trainer_cmd + ([output_flag, out] if output_flag else [])
        console = open(out + ('/console.txt' if nodes == 1 else
                              f'/console{n}.txt'), 'w+')
        consoles.append(console)
        log_dirs.append(log_dir)
        if n == 2:
            pending.append((cmd, console))
            continue
        agents.append(subprocess.Popen(cmd, stdout=console,
                                       stderr=subprocess.STDOUT, env=env))
        if plan is not None:
            plan.agents = agents
    seen = {}  # rank -> [pids in order]
    where = {}  # rank -> (node, (local rank, group rank))
    node_pids = {}  # node -> every worker pid seen there
    standbys = set()  # every standby pid seen (before it took a rank)

    def steps_of_rank(rank):
        if steps is not None:
            return steps(rank)
        if rank not in where:
            return -1
        node, (local, _) = where[rank]
        return steps_of(log_dirs[node], local)

    deadline = start + args.timeout
    while any(a.poll() is None for a in agents):
        if time.monotonic() > deadline:
            for a in agents:
                if a.poll() is None:
                    a.send_signal(signal.SIGTERM)
            for a in agents:
                a.wait(30)
            break
        for n, a in enumerate(agents):
            if getattr(args, 'standby', False):
                standbys |= standbys_of(a.pid)
            local_ranks = {}
            for rank, pid in workers_of(a.pid, local_ranks).items():
                where[rank] = (n, local_ranks[rank])
                node_pids.setdefault(n, set()).add(pid)
                pids = seen.setdefault(rank, [])
                if not pids or pids[-1] != pid:
                    pids.append(pid)
        if pending and (PLACE_OPEN.search(console_text(consoles[0]))
                        if plan.kind == 'rejoin' else len(seen) >= RANKS):
            # spare: the round formed, the spare parks on the wait list;
            # rejoin: node 1 was lost and its place is open.
            cmd, console = pending.pop()
            agents.append(subprocess.Popen(cmd, stdout=console,
                                           stderr=subprocess.STDOUT, env=env))
            plan.spare_since = time.monotonic()
        if plan is not None:
            try:
                plan.act(seen, steps_of_rank)
            except ProcessLookupError:
                pass  # it exited meanwhile: the next poll sees
        time.sleep(0.02)
    seconds = time.monotonic() - start
    if plan is not None:
        plan.finish()
    # No standby outlives its agent (killed at the job's end, or by
    # PR_SET_PDEATHSIG with the agent).
    time.sleep(0.2)
    left = []
    for pid in sorted(standbys):
        try:
            with open(f'/proc/{pid}/stat') as f:
                if f.read().rsplit(')', 1)[1].split()[0] != 'Z':
                    left.append(pid)
        except OSError:
            pass
    text = ''
    for console in consoles:
        console.seek(0)
        text += console.read()
        console.close()
    codes = [a.returncode for a in agents]
    if plan is not None and plan.kind in WHOLE_NODE:
        del codes[1]  # that node was killed
    code = next((c for c in codes if c != 0), 0)
    # A standby's /proc environ stays the one it started with (no RANK):
    # the console names the rank it took.
    for rank, _, pid, _ in BY_STANDBY.findall(text):
        seen.setdefault(int(rank), []).append(int(pid))
    seen['standbys'] = standbys
    seen['standbys_left'] = left
    seen['node_pids'] = node_pids
    seen['where'] = where
    # Group rank 0's agent serves the workers' store: its node's ranks.
    seen['store_node_ranks'] = sorted(
        r for r, (_, (_, group)) in where.items() if group == 0)
    return code, text, seen, seconds


def console_text(console):
    """What an agent wrote to its console file so far."""
    with open(console.name) as f:
        return f.read()


def metrics(out):
    records = []
    with open(out + '/metrics.jsonl') as f:
        for line in f:
            r = json.loads(line)
            for timing in ('time', 'samples_per_s', 'profile'):
                r.pop(timing, None)
            records.append(r)
    return records


def without_addresses(lines):
    """LibTorch names optimizer state by the parameter's address in the
    process that saved it (hex in 1.13: "= 0x55...", decimal in 2.x): each
    becomes its place in its group."""
    marker = 'optimizer/param_groups/param_groups/'
    param = re.compile(r'^' + re.escape(marker) +
                       r'(\d+)/params/(\d+) = (0x[0-9a-fA-F]+|\d+)$')
    names = []
    for line in lines:
        m = param.match(line)
        if m:
            names.append((m.group(3), f'group{m.group(1)}/param{m.group(2)}'))
    out = []
    for line in lines:
        for address, name in names:
            # Whole addresses only: one may be another's prefix.
            line = re.sub(r'(?<![0-9a-zA-Z])' + re.escape(address) +
                          r'(?![0-9a-zA-Z])', name, line)
        out.append(line)
    return sorted(out)


def checkpoint(args, out):
    files = sorted(glob.glob(out + '/checkpoints/ckpt-*.pt'))
    assert files, f'no checkpoint in {out}/checkpoints'
    r = subprocess.run([args.bin + '/worker_rank_helper', 'ckpt_digest',
                        files[-1]], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if ' ' in l and
             'samples_per_s' not in l and
             not l.startswith('meta/scalar_values ')]
    assert len(lines) > 10, r.stdout
    return without_addresses(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--bin', required=True)
    p.add_argument('--ddprun')
    p.add_argument('--trainer', choices=sorted(TRAINERS), required=True)
    p.add_argument('--kill', action='append', default=[])
    p.add_argument('--chaos', action='append', default=[])
    p.add_argument('--sweep', type=int, default=0,
                   help='N kill points spread over the whole job')
    p.add_argument('--timeout', type=float, default=300)
    p.add_argument('--nodes', type=int, choices=[1, 2], default=1)
    p.add_argument('--keep', action='store_true')
    p.add_argument('--standby', action='store_true',
                   help='--standby_workers: kills are taken by the standby')
    p.add_argument('--env', action='append', default=[],
                   help='KEY=VALUE for ddprun and the workers')
    args = p.parse_args()
    for item in args.env:
        key, _, value = item.partition('=')
        os.environ[key] = value
    args.ddprun = args.ddprun or args.bin + '/ddprun'
    make, data_file, flags = TRAINERS[args.trainer]
    trainer = f'{args.bin}/{args.trainer}_trainer'
    work = tempfile.mkdtemp(prefix=f'ddprun_scope_{args.trainer}_')
    failures = []
    try:
        data = work + '/data'
        subprocess.run([trainer, '--make_synthetic', data] + make.split(),
                       check=True, capture_output=True, timeout=120)
        trainer_cmd = [trainer, '--csv_path', f'{data}/{data_file}'] + \
            flags.split()
        clean_out = work + '/clean'
        os.makedirs(clean_out)
        code, text, seen, clean_seconds = run(args, trainer_cmd, clean_out)
        if code != 0:
            print(text)
            print(f'FAIL: the uninterrupted run exited {code}')
            return 1
        if args.standby and (not seen['standbys'] or seen['standbys_left']):
            print(text)
            print(f'FAIL: the uninterrupted run\'s standbys: seen '
                  f'{sorted(seen["standbys"])}, left {seen["standbys_left"]}')
            return 1
        print(f'uninterrupted: {clean_seconds:.1f} s')
        clean_metrics = metrics(clean_out)
        clean_ckpt = checkpoint(args, clean_out)
        plans = []
        for spec in args.kill:
            rank, step = (int(x) for x in spec.split('@'))
            plans.append((f'kill rank {rank} at step {step}',
                          Plan('kill', step, rank)))
        if args.sweep:
            last = last_step_of(clean_out)
            if last < 2:
                print(f'FAIL: the uninterrupted run counted {last} steps')
                return 1
            print(f'sweep: {args.sweep} kill points over steps 1-{last - 1}')
            for rank, step in sweep_points(args.sweep, last):
                plans.append((f'kill rank {rank} at step {step}',
                              Plan('kill', step, rank)))
        for spec in args.chaos:
            kind, step = spec.split('@')
            plans.append((f'{kind} at step {step}', Plan(kind, int(step))))
        remote_kills = 0
        for n, (name, plan) in enumerate(plans):
            out = f'{work}/run{n}'
            os.makedirs(out)
            code, text, seen, seconds = run(args, trainer_cmd, out, plan)
            problems = []
            if not plan.done:
                problems.append('the fault was never injected')
            if code != 0:
                problems.append(f'ddprun exited {code}')
            healed = HEALED.findall(text)
            if plan.kind == 'write':
                if plan.writes is not None and plan.writes.kills > 1:
                    # Each earlier kill came after its write was renamed:
                    # ranks 0 replaced more than once (and healed as often).
                    problems.append(f'{plan.writes.kills} kills before one '
                                    'cut a write short; raise STEP or slow '
                                    'the write')
                left = glob.glob(out + '/checkpoints/*.tmp.*')
                if left:
                    problems.append(f'temporary files left behind: {left}')
            if plan.kind == 'node':
                # The surviving node restarted alone, smaller, and finished.
                pids = seen['node_pids'].get(0, set())
                if len(pids) < RANKS:
                    problems.append('node 0 did not start its workers again '
                                    f'(its worker pids: {sorted(pids)})')
                last = metrics(out)[-1] if not problems else {}
                if last.get('world_size') != RANKS // 2 or \
                        last.get('epoch') != clean_metrics[-1]['epoch']:
                    problems.append(f'the last metrics record is {last}, not '
                                    'the last epoch with world_size '
                                    f'{RANKS // 2}')
                if 'no node joined to take its place within 5.0 s' not in text:
                    problems.append('the lost node\'s place was not kept '
                                    'open 5 s first')
            elif plan.kind in ('spare', 'rejoin'):
                # Node 0's workers kept their processes; the spare's took
                # ranks 2 and 3 and healed.
                for r, (node, _) in seen['where'].items():
                    if node == 0 and len(seen.get(r, [])) != 1:
                        problems.append(f'rank {r} of node 0 ran as pids '
                                        f'{seen.get(r)}')
                taken = HEALED_NODE.findall(text)
                if [t[:4] for t in taken] != [('2', '3', '1', '0')]:
                    problems.append(f'lost-node heal lines: {taken}')
                healed = [(t[0], t[2], t[3], t[4]) for t in taken]
            elif plan.kind in ('kill', 'stop', 'write'):
                # Replaced alone: the others kept their processes.
                problems += not_replaced_alone(seen, plan.rank)
                if len(healed) != 1 or int(healed[0][0]) != plan.rank:
                    problems.append(f'heal lines: {healed}')
            else:
                # The group restarted: every rank in a new process.
                if any(len(seen.get(r, [])) < 2 for r in range(RANKS)):
                    problems.append(f'no group restart: pids {seen}')
                if 'restarting the group' not in text:
                    problems.append('the fallback was not announced')
            if not problems and plan.kind != 'node':
                got, want = metrics(out), clean_metrics
                if plan.kind in ('two', 'heal'):
                    # Resumed from a checkpoint mid-epoch, as under group:
                    # that epoch's train_loss averages the steps since.
                    got = [dict(r, train_loss=None) for r in got]
                    want = [dict(r, train_loss=None) for r in want]
                if got != want:
                    problems.append('metrics.jsonl differs from the '
                                    'uninterrupted run')
                if checkpoint(args, out) != clean_ckpt:
                    problems.append('the final checkpoint differs from the '
                                    'uninterrupted run')
            started = ''
            if seen['standbys_left']:
                problems.append('standby processes outlived ddprun: '
                                f'{seen["standbys_left"]}')
            if args.standby and plan.kind == 'kill':
                taken = BY_STANDBY.findall(text)
                if len(taken) != 1 or int(taken[0][0]) != plan.rank:
                    problems.append(f'standby takeover lines: {taken}')
                elif int(taken[0][2]) not in seen['standbys']:
                    problems.append(f'pid {taken[0][2]} took rank '
                                    f'{plan.rank} but was never seen '
                                    f'waiting as a standby '
                                    f'({sorted(seen["standbys"])})')
                elif seen.get(plan.rank, [None])[-1] != int(taken[0][2]):
                    problems.append(f'rank {plan.rank} ran as pids '
                                    f'{seen.get(plan.rank)}, the standby '
                                    f'was {taken[0][2]}')
                else:
                    started = f', by the standby {taken[0][3]} s after'
            elif plan.kind == 'kill':
                again = STARTED_AGAIN.findall(text)
                if again:
                    started = f', a new process {again[0][3]} s after'
            heal = healed[0][3] if healed else '-'
            status = 'PASS' if not problems else 'FAIL'
            node = ''
            if args.nodes > 1 and plan.kind == 'kill':
                remote = plan.rank not in seen['store_node_ranks']
                remote_kills += remote
                node = (' (on a node that does not serve the store)'
                        if remote else ' (on the node that serves the store)')
            if plan.kind == 'write' and plan.writes is not None:
                node = f' (cut {plan.writes.landed})'
            print(f'{status} {name}{node}: healed in {heal} s{started}, '
                  f'run {seconds:.1f} s (uninterrupted {clean_seconds:.1f} s)')
            if problems:
                print(text[-6000:])
                for problem in problems:
                    print('  ' + problem)
                failures.append(name)
        if args.nodes > 1 and (args.kill or args.sweep) and not remote_kills:
            print('FAIL: no kill hit a rank of a node that does not serve '
                  'the store')
            failures.append('placement')
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print('kept', work)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
