#!/usr/bin/python3
"""torchrun compatibility tests: ddprun next to the torchrun of $PYTHON_EXEC.

Usage: compat_test.py CASE --ddprun BIN --shared DIR
Cases:
  ddp_standalone   a real torch.distributed + DDP script under
                   `ddprun --standalone --nproc_per_node=2`
  ddp_static       the same under `ddprun --nnodes=1 --nproc_per_node=2`
  env_standalone   worker env + argv, torchrun vs ddprun, --standalone
  env_static       the same with the static backend, --nnodes=1
  env_legacy       torch.distributed.launch vs ddprun-launch (--local_rank)
  env_restart      --standalone --max_restarts=1, rank 0 fails attempt 0:
                   both attempts compared (TORCHELASTIC_RESTART_COUNT, ...)
  signal_forward   SIGTERM to the launcher reaches both workers
  failure_plain    a worker raises: same exit code and failure summary as
                   torchrun (time, host, pid, log dir masked)
  failure_record   the same through torch's @record (error file traceback)
  env_accelerate   ddprun-accelerate --multi_gpu vs torchrun with accelerate's
                   environment (what `accelerate launch` runs): every rank
  ddp_accelerate   ddp_check.py under ddprun-accelerate --multi_gpu
  env_deepspeed    ddprun-deepspeed --num_gpus 2: exactly deepspeed launch's
                   variables and --local_rank=N (from its source)
  ddp_deepspeed    ddp_check.py (argparse --local_rank, as DeepSpeed scripts)
                   under ddprun-deepspeed
  file_timer       TORCHELASTIC_ENABLE_FILE_TIMER=1: a worker whose
                   `with expires(after=1)` scope overruns is killed (-9)

The interpreter (for torchrun and for the workers of both launchers) is
$PYTHON_EXEC, default /usr/bin/python3 (Debian's torch 1.13). The
expectations follow the torch version it reports, so the same cases run
against any torchrun: ddprun must set exactly the variables that torchrun
sets, e.g. NCCL_ASYNC_ERROR_HANDLING under torch < 2.2 and
TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2, and `--local_rank` / `--local-rank`
(torch >= 2.0) under torch.distributed.launch.

Exit 0 = pass, 1 = fail (with the reason), 77 = skipped (no torch in the
interpreter; a failure under CI=true). Every launch runs under a deadline.
"""
import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Debian's torch lives in /usr/bin/python3; the torch 2.x legs point
# PYTHON_EXEC at another interpreter.
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH_TIMEOUT_S = 120
sys.path.insert(0, os.path.dirname(HERE))
from ddprun_skip import SKIP, skip_unless_ci  # noqa: E402

# Variables whose values differ between any two launches.
VARYING = {"MASTER_PORT", "TORCHELASTIC_ERROR_FILE"}
# Set by the Python interpreter itself (PEP 538 locale coercion), not by a
# launcher.
INTERPRETER_SET = {"LC_CTYPE"}
# Per-rank values that must be identical under both launchers (absent under
# both counts as identical).
LAYOUT = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
          "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
          "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
          "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS",
          "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
          "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCHELASTIC_USE_AGENT_STORE"]
# Deliberate differences: name -> the value ddprun must set, whatever
# torchrun sets. torchrun's agent hosts a TCPStore and tells workers to
# attach to it (True: 1.13's static backend; every backend from torch 2.x,
# unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1); on one node (every case
# here) ddprun's agent hosts no TCPStore, so rank 0's worker creates it
# (False), as under torch 1.13's c10d backend. Static multi-node jobs get
# True: node 0's agent serves the store on --master_port
# (agent/hosting/agent_store.h, tests/multinode/agent_store_job_test.cc).
EXPECTED_DIFFERENCES = {"TORCHELASTIC_USE_AGENT_STORE": "False"}
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}"
                     r"-[0-9a-f]{12}$")


class Failure(Exception):
    pass


def torch_version():
    """(major, minor) of the torch in PYTHON, or None without torch. Only
    the driver imports torch; the launchers must not need to."""
    p = subprocess.run([PYTHON, "-c", "import torch.distributed, torch; "
                        "print(torch.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       timeout=LAUNCH_TIMEOUT_S)
    if p.returncode != 0:
        return None
    m = re.match(r"(\d+)\.(\d+)", p.stdout.decode().strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


TORCH = None  # set by main()


def expected_torchrun_contract():
    """What torchrun of TORCH gives every worker, where versions differ
    (torch/distributed/elastic/agent/server/local_elastic_agent.py,
    torch/distributed/run.py): (NCCL variable set, variable not set,
    TORCHELASTIC_SIGNALS_TO_HANDLE exported, legacy --local-rank flag)."""
    new_nccl = TORCH >= (2, 2)
    return ("TORCH_NCCL_ASYNC_ERROR_HANDLING" if new_nccl
            else "NCCL_ASYNC_ERROR_HANDLING",
            "NCCL_ASYNC_ERROR_HANDLING" if new_nccl
            else "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            TORCH >= (2, 9),
            "--local-rank" if TORCH >= (2, 0) else "--local_rank")


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def base_env(tmp):
    """The launcher's environment: ours minus anything a launcher sets."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "TORCHELASTIC_", "SLURM_"))
           and k not in set(LAYOUT) | {"MASTER_ADDR", "MASTER_PORT",
                                       "JOB_COMPLETION_INDEX",
                                       "TORCH_NCCL_ASYNC_ERROR_HANDLING"}}
    env["PYTHON_EXEC"] = PYTHON
    env["COMPAT_OUT"] = tmp
    # Debian's torch 2.6 is built without libuv but asks for it by default:
    # workers' init_process_group fails unless USE_LIBUV=0 (under any
    # launcher). torch 1.13 ignores the variable.
    env["USE_LIBUV"] = "0"
    # No accelerate config file from the machine (ddprun-accelerate reads
    # $HF_HOME/accelerate/default_config.yaml as accelerate does).
    env["HF_HOME"] = os.path.join(tmp, "no_hf_home")
    return env


def run(cmd, env, what):
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        raise Failure("%s did not finish in %d s:\n%s" %
                      (what, LAUNCH_TIMEOUT_S, out[-3000:]))
    out = p.stdout.decode(errors="replace")
    check(p.returncode == 0, "%s exited %d:\n%s" % (what, p.returncode,
                                                    out[-3000:]))
    return out


def torchrun_cmd(tmp, shared, env, legacy=False):
    """Debian's torchrun with the start-up fixes of torchrun_fixes.py on
    PYTHONPATH (added to env)."""
    fix_dir = os.path.join(tmp, "sitecustomize")
    os.makedirs(fix_dir, exist_ok=True)
    shutil.copy(os.path.join(HERE, "torchrun_fixes.py"), fix_dir)
    # The fixes import torch; workers inherit PYTHONPATH, so apply them only
    # in the launcher (workers have TORCHELASTIC_RUN_ID) or every env_dump
    # worker would pay seconds for a torch import it does not need.
    with open(os.path.join(fix_dir, "sitecustomize.py"), "w") as f:
        f.write("import os\n"
                "if 'TORCHELASTIC_RUN_ID' not in os.environ:\n"
                "    import torchrun_fixes\n"
                "    torchrun_fixes.apply()\n")
    env["PYTHONPATH"] = fix_dir + (
        ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    module = "torch.distributed.launch" if legacy else "torch.distributed.run"
    # 1.13 polls every 5 s by default; 0.1 only makes the test faster.
    return [PYTHON, "-m", module, "--monitor_interval", "0.1"]


# torchrun < 2.x binds its --standalone rendezvous store to the fixed port
# 29400 (torch/distributed/run.py: "localhost:29400"; 2.x uses port 0). A
# second torchrun started meanwhile does not fail at once: it becomes a
# client of the first one's store and fails with RendezvousConnectionError
# when the first one exits (seen as a CI failure of compat/failure_record
# next to another compat case under ctest -j2). Reference launches with
# --standalone therefore take this machine-wide lock; ddprun's own launches
# never need it (its --standalone binds port 0).
STANDALONE_LOCK = os.path.join(tempfile.gettempdir(),
                               "ddprun-compat-torchrun-29400.lock")
LOCK_WAIT_S = 240


@contextlib.contextmanager
def torchrun_port_lock(flags):
    if "--standalone" not in flags or TORCH >= (2, 0):
        yield
        return
    with open(STANDALONE_LOCK, "a") as f:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                check(time.monotonic() < deadline,
                      "another torchrun --standalone held port 29400's lock "
                      "(%s) for %d s" % (STANDALONE_LOCK, LOCK_WAIT_S))
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def without_ddprun_hook(env):
    """A worker's environment without ddprun's stack-dump hook and step
    counter (the DDPRUN_STACKS_* variables, DDPRUN_STEP_FILE, the folder
    appended to PYTHONPATH): ddprun's own extension, part of no launcher's
    contract."""
    env = {k: v for k, v in env.items()
           if not k.startswith("DDPRUN_STACKS_") and k != "DDPRUN_STEP_FILE"}
    path = env.get("PYTHONPATH")
    if path is not None and path.endswith("/lib/ddprun/python"):
        rest = path.rsplit(":", 1)[0] if ":" in path else ""
        if rest:
            env["PYTHONPATH"] = rest
        else:
            del env["PYTHONPATH"]
    return env


def collect(out_dir, expected, attempt):
    """{rank: {"env": ..., "argv": ...}} of one attempt (without ddprun's
    stack-dump hook)."""
    runs = {}
    for name in os.listdir(out_dir):
        if name.startswith("env_%s_" % attempt) and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                d = json.load(f)
            d["env"] = without_ddprun_hook(d["env"])
            rank = int(d["env"]["RANK"])
            check(rank not in runs,
                  "rank %d started twice in attempt %s" % (rank, attempt))
            runs[rank] = d
    check(sorted(runs) == list(range(expected)),
          "attempt %s: expected ranks 0..%d, got %s" %
          (attempt, expected - 1, sorted(runs)))
    return runs


def launcher_set(worker_env, parent_env):
    """Names the launcher added or changed."""
    return {k for k, v in worker_env.items()
            if parent_env.get(k) != v} - INTERPRETER_SET


def side_by_side(args, flags, legacy=False, static=False, restart=False):
    """Runs env_dump.py under torchrun and ddprun and compares the workers.
    With restart, attempt 0 fails once (--max_restarts=1) and both attempts
    are compared."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_")
    try:
        script_args = ["a", "--b", "c d", "--help", "-m"]
        if restart:
            flags = flags + ["--max_restarts=1"]
            script_args.append("--fail-first-attempt")
        attempts = [0, 1] if restart else [0]
        results = {}
        for name in ("torchrun", "ddprun"):
            out = os.path.join(tmp, name)
            os.makedirs(out)
            env = base_env(out)
            if name == "torchrun":
                prefix = torchrun_cmd(tmp, args.shared, env, legacy)
                run_flags = flags + (["--master_port", str(free_port())]
                                     if static or legacy else [])
            else:
                # Static ddprun on one node picks a free master port itself;
                # legacy mode defaults to 29500 like torch.distributed.launch,
                # so it gets a free one to stay clear of parallel tests.
                binary = args.ddprun + ("-launch" if legacy else "")
                prefix = [binary]
                run_flags = flags + (["--master_port", str(free_port())]
                                     if legacy else [])
            cmd = prefix + run_flags + [os.path.join(HERE, "env_dump.py")] \
                + script_args
            with torchrun_port_lock(run_flags if name == "torchrun" else []):
                run(cmd, env, name)
            results[name] = ([collect(out, 2, a) for a in attempts], env)

        (t_attempts, t_parent), (d_attempts, d_parent) = (
            results["torchrun"], results["ddprun"])
        for attempt in attempts:
            for rank in (0, 1):
                names = compare_rank(t_attempts[attempt][rank], t_parent,
                                     d_attempts[attempt][rank], d_parent,
                                     attempt, flags)
                check_argv(t_attempts[attempt][rank], d_attempts[attempt][rank],
                           script_args, legacy)
            # Both ranks of one attempt share the master and run id.
            for label, runs in (("torchrun", t_attempts[attempt]),
                                ("ddprun", d_attempts[attempt])):
                for key in ("MASTER_PORT", "TORCHELASTIC_RUN_ID"):
                    check(runs[0]["env"][key] == runs[1]["env"][key],
                          "%s ranks disagree on %s" % (label, key))
        print("OK (torch %d.%d): %d attempt(s); %d launcher variables "
              "identical per rank: %s" % (TORCH + (len(attempts), len(names),
                                          " ".join(sorted(names)))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare_rank(t, t_parent, d, d_parent, attempt, flags):
    """Asserts one rank's environment matches; returns torchrun's names."""
    t_env, d_env = t["env"], d["env"]
    where = "attempt %d rank %s" % (attempt, t_env["RANK"])
    # 1. Same variable names.
    t_set = launcher_set(t_env, t_parent)
    d_set = launcher_set(d_env, d_parent)
    missing = sorted(t_set - d_set)
    extra = sorted(d_set - t_set)
    check(not missing, "%s: ddprun does not set %s" % (where, missing))
    check(not extra, "%s: ddprun sets %s, torchrun %d.%d does not" %
          ((where, extra) + TORCH))
    # 1b. The version-dependent names, from torch's source (not only from
    # the torchrun that ran next to it).
    nccl, not_nccl, signals, _ = expected_torchrun_contract()
    for label, e in (("torchrun", t_env), ("ddprun", d_env)):
        check(e.get(nccl) == "1", "%s %s: %s is %r, expected '1' under torch "
              "%d.%d" % ((label, where, nccl, e.get(nccl)) + TORCH))
        check(not_nccl not in e, "%s %s: %s is set under torch %d.%d" %
              ((label, where, not_nccl) + TORCH))
        check(("TORCHELASTIC_SIGNALS_TO_HANDLE" in e) == signals,
              "%s %s: TORCHELASTIC_SIGNALS_TO_HANDLE %s under torch %d.%d" %
              ((label, where, "missing" if signals else "set") + TORCH))
    # 2. Same rank layout and constants.
    for key in LAYOUT:
        expected = EXPECTED_DIFFERENCES.get(key)
        if expected is not None:
            check(d_env.get(key) == expected,
                  "%s: %s is %r under ddprun, expected %r" %
                  (where, key, d_env.get(key), expected))
            continue
        check(t_env.get(key) == d_env.get(key),
              "%s: %s is %r under torchrun, %r under ddprun" %
              (where, key, t_env.get(key), d_env.get(key)))
    # 3. Values that vary, checked for shape.
    for label, e in (("torchrun", t_env), ("ddprun", d_env)):
        port = int(e["MASTER_PORT"])
        check(0 < port < 65536, "%s MASTER_PORT %r" % (label, port))
        check(e["TORCHELASTIC_ERROR_FILE"].endswith(
            "attempt_%d/%s/error.json" % (attempt, e["LOCAL_RANK"])),
            "%s %s: error file %r" % (label, where,
                                      e["TORCHELASTIC_ERROR_FILE"]))
    if "--standalone" in flags:
        # torchrun >= 2.x announces socket.getfqdn() (RendezvousStoreInfo);
        # ddprun keeps 127.0.0.1 for a one-node job (README differences).
        allowed = {"torchrun": LOOPBACK | {socket.getfqdn()},
                   "ddprun": {"127.0.0.1"}}
        for label, e in (("torchrun", t_env), ("ddprun", d_env)):
            check(e["MASTER_ADDR"] in allowed[label],
                  "%s MASTER_ADDR %r" % (label, e["MASTER_ADDR"]))
            check(UUID_RE.match(e["TORCHELASTIC_RUN_ID"]),
                  "%s run id %r is not a uuid4" %
                  (label, e["TORCHELASTIC_RUN_ID"]))
    else:
        for key in ("MASTER_ADDR", "TORCHELASTIC_RUN_ID"):
            check(t_env[key] == d_env[key],
                  "%s: %s is %r under torchrun, %r under ddprun" %
                  (where, key, t_env[key], d_env[key]))
    return t_set


def check_argv(t, d, script_args, legacy):
    """Script arguments pass through untouched; legacy mode prepends
    --local_rank=N (torch < 2.0) or --local-rank=N under both launchers."""
    check(t["argv"] == d["argv"],
          "argv: torchrun %r, ddprun %r" % (t["argv"], d["argv"]))
    if legacy:
        flag = expected_torchrun_contract()[3]
        check(d["argv"] == ["%s=%s" % (flag, d["env"]["LOCAL_RANK"])] +
              script_args, "legacy argv %r" % d["argv"])
    else:
        check(d["argv"] == script_args, "argv %r" % d["argv"])


# `accelerate launch --multi_gpu --num_processes 2 --mixed_precision bf16
# --dynamo_backend inductor --main_process_port P SCRIPT ARGS` is, per
# accelerate/commands/launch.py (multi_gpu_launcher: torch.distributed.run
# in-process, under patch_environment) and accelerate/utils/launch.py
# (prepare_multi_gpu_env), torchrun with these flags in a launcher whose
# environment has these variables.
ACCELERATE_FLAGS = ["--multi_gpu", "--num_processes", "2",
                    "--mixed_precision", "bf16", "--dynamo_backend",
                    "inductor"]
ACCELERATE_ENV = {
    "ACCELERATE_MIXED_PRECISION": "bf16",       # str(PrecisionType)
    "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR",    # DynamoBackend(...upper())
    "ACCELERATE_DYNAMO_MODE": "default",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False",
    "ACCELERATE_DYNAMO_USE_DYNAMIC": "False",
    "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
    # num_cpu_threads_per_process = get_int_from_env(["OMP_NUM_THREADS"], 1)
    "OMP_NUM_THREADS": "1",
}


def accelerate_torchrun_flags(port):
    """_filter_args(args, torch.distributed.run's parser): what accelerate's
    namespace gives torchrun for ACCELERATE_FLAGS."""
    return ["--nproc_per_node", "2", "--master_port", str(port),
            "--rdzv_backend", "static", "--rdzv_conf", "",
            "--max_restarts", "0", "--monitor_interval", "0.1",
            "--tee", "0", "--role", "default"]


def accelerate_side_by_side(args):
    """ddprun-accelerate's workers against torchrun's under accelerate's
    environment: the same variables (torchrun's, of this torch version, and
    accelerate's) with the same values, the same argv."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_acc_")
    try:
        script_args = ["a", "--b", "c d", "--help", "-m"]
        results = {}
        for name in ("torchrun", "ddprun"):
            out = os.path.join(tmp, name)
            os.makedirs(out)
            env = base_env(out)
            env.pop("OMP_NUM_THREADS", None)
            parent = dict(env)
            port = free_port()
            if name == "torchrun":
                cmd = torchrun_cmd(tmp, args.shared, env) + \
                    accelerate_torchrun_flags(port)
                env.update(ACCELERATE_ENV)  # patch_environment
                parent["PYTHONPATH"] = env["PYTHONPATH"]
            else:
                cmd = [os.path.join(os.path.dirname(args.ddprun),
                                    "ddprun-accelerate")] + ACCELERATE_FLAGS + \
                    ["--main_process_port", str(port)]
            run(cmd + [os.path.join(HERE, "env_dump.py")] + script_args, env,
                name)
            results[name] = (collect(out, 2, 0), parent)
        (t_runs, t_parent), (d_runs, d_parent) = (results["torchrun"],
                                                  results["ddprun"])
        for rank in (0, 1):
            names = compare_rank(t_runs[rank], t_parent, d_runs[rank],
                                 d_parent, 0, ["--static"])
            check_argv(t_runs[rank], d_runs[rank], script_args, False)
            for key, value in ACCELERATE_ENV.items():
                for label, r in (("torchrun", t_runs[rank]),
                                 ("ddprun", d_runs[rank])):
                    check(r["env"].get(key) == value,
                          "%s rank %d: %s is %r, accelerate sets %r" %
                          (label, rank, key, r["env"].get(key), value))
        print("OK (torch %d.%d): %d variables identical per rank under "
              "accelerate's multi-GPU launch: %s" %
              (TORCH + (len(names), " ".join(sorted(names)))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def deepspeed_contract(args):
    """Every rank of ddprun-deepspeed --num_gpus 2 gets exactly what
    deepspeed/launcher/launch.py sets (its main(): CUDA_VISIBLE_DEVICES from
    the node's slots, MASTER_ADDR/PORT, WORLD_SIZE, CROSS_RANK, CROSS_SIZE,
    LOCAL_SIZE, then RANK and LOCAL_RANK per process) and `--local_rank=N`
    before the script's arguments; whatever the torch version."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_ds_")
    try:
        env = base_env(tmp)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        port = free_port()
        script_args = ["a", "--b", "c d"]
        run([os.path.join(os.path.dirname(args.ddprun), "ddprun-deepspeed"),
             "--num_gpus=2", "--master_port=%d" % port,
             os.path.join(HERE, "env_dump.py")] + script_args, env,
            "ddprun-deepspeed")
        runs = collect(tmp, 2, "x")
        for rank, r in runs.items():
            expected = {"CUDA_VISIBLE_DEVICES": "0,1",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "WORLD_SIZE": "2", "CROSS_RANK": "0",
                        "CROSS_SIZE": "1", "LOCAL_SIZE": "2",
                        "RANK": str(rank), "LOCAL_RANK": str(rank % 2)}
            got = {k: v for k, v in r["env"].items()
                   if env.get(k) != v and k not in INTERPRETER_SET}
            check(got == expected, "rank %d: launcher variables %r, "
                  "deepspeed's launch.py sets %r" % (rank, got, expected))
            check(r["argv"] == ["--local_rank=%d" % rank] + script_args,
                  "rank %d argv %r" % (rank, r["argv"]))
        print("OK (torch %d.%d): both ranks have exactly deepspeed launch's "
              "variables and --local_rank" % TORCH)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_run(args, flags, launcher=None, local_rank_arg=False):
    """ddp_check.py under `launcher` (default ddprun) with `flags`; with
    local_rank_arg the launcher must pass --local_rank=LOCAL_RANK."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_ddp_")
    try:
        env = base_env(tmp)
        launcher = launcher or args.ddprun
        out = run([launcher] + flags + [os.path.join(HERE, "ddp_check.py"),
                                        tmp], env,
                  "%s %s ddp_check.py" % (os.path.basename(launcher),
                                          " ".join(flags)))
        res = {}
        for rank in (0, 1):
            path = os.path.join(tmp, "ddp_%d.json" % rank)
            check(os.path.exists(path),
                  "rank %d wrote no result; output:\n%s" % (rank, out[-3000:]))
            with open(path) as f:
                res[rank] = json.load(f)
        for rank, r in res.items():
            check(r["rank"] == rank == r["env_rank"] == r["env_local_rank"],
                  "rank %d reported %r" % (rank, r))
            check(r["world"] == 2, "world %r" % r["world"])
            check(r["arg_local_rank"] == (rank if local_rank_arg else None),
                  "rank %d: --local_rank argument %r" %
                  (rank, r["arg_local_rank"]))
            check(r["allreduce"] == 3.0,
                  "all_reduce of 1+2 gave %r" % r["allreduce"])
            check(r["params_equal_across_ranks"],
                  "rank %d: parameters differ across ranks" % rank)
            check(r["matches_single_process_reference"],
                  "rank %d: DDP step differs from the averaged-gradient "
                  "reference" % rank)
        check(res[0]["params"] == res[1]["params"], "final parameters differ")
        print("OK: all_reduce=3.0, DDP parameters equal on both ranks and "
              "match the single-process reference")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def failure_summary(output):
    """The summary block torchrun prints on failure, with the values that
    differ between any two runs (time, host, pid, log dir) masked."""
    lines = output.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("=" * 20)]
    check(len(starts) >= 2, "no failure summary in:\n%s" % output[-3000:])
    block = lines[starts[-2]:starts[-1] + 1]
    masked = []
    for line in block:
        line = re.sub(r"^(  time      : ).*", r"\1<TIME>", line)
        line = re.sub(r"^(  host      : ).*", r"\1<HOST>", line)
        line = re.sub(r"\(pid: \d+\)", "(pid: <PID>)", line)
        line = re.sub(r"/\S*/attempt_", "<LOGDIR>/attempt_", line)
        masked.append(line.rstrip())
    return masked


def failure_report(args, record):
    """Same exit code and same failure summary as torchrun."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_fail_")
    try:
        script = [os.path.join(HERE, "fail_worker.py")] + (
            ["--record"] if record else [])
        flags = ["--standalone", "--nproc_per_node=2"]
        outputs = {}
        for name in ("torchrun", "ddprun"):
            env = base_env(tmp)
            if name == "torchrun":
                prefix = torchrun_cmd(tmp, args.shared, env)
            else:
                prefix = [args.ddprun]
            try:
                with torchrun_port_lock(flags if name == "torchrun" else []):
                    p = subprocess.run(prefix + flags + script, env=env,
                                       stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT,
                                       timeout=LAUNCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise Failure("%s did not stop the job in %d s" %
                              (name, LAUNCH_TIMEOUT_S))
            outputs[name] = (p.returncode, p.stdout.decode(errors="replace"))
        t_rc, t_out = outputs["torchrun"]
        d_rc, d_out = outputs["ddprun"]
        check(t_rc == d_rc == 1, "exit codes: torchrun %d, ddprun %d" %
              (t_rc, d_rc))
        t_sum, d_sum = failure_summary(t_out), failure_summary(d_out)
        check(t_sum == d_sum, "failure summaries differ:\n--- torchrun\n%s"
              "\n--- ddprun\n%s" % ("\n".join(t_sum), "\n".join(d_sum)))
        check(any("ValueError: boom from rank 1" in l for l in d_out.splitlines()),
              "the worker's exception is not in ddprun's output")
        print("OK: exit 1 and identical failure summary (%d lines)" %
              len(d_sum))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def signal_forward(args):
    """SIGTERM to the launcher reaches every worker under both launchers.
    Exit codes differ on purpose: torchrun 1.13 dies of an uncaught
    SignalException (1); ddprun exits 128+15 like a shell."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_sig_")
    try:
        codes = {}
        for name in ("torchrun", "ddprun"):
            out = os.path.join(tmp, name)
            os.makedirs(out)
            env = base_env(out)
            prefix = (torchrun_cmd(tmp, args.shared, env)
                      if name == "torchrun" else [args.ddprun])
            flags = ["--standalone", "--nproc_per_node=2"]
            with torchrun_port_lock(flags if name == "torchrun" else []):
                p = subprocess.Popen(
                    prefix + flags + [os.path.join(HERE, "signal_worker.py")],
                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                try:
                    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
                    while not all(os.path.exists(os.path.join(out, "up_%d" % r))
                                  for r in (0, 1)):
                        check(p.poll() is None and time.monotonic() < deadline,
                              "%s: workers did not start" % name)
                        time.sleep(0.05)
                    p.send_signal(signal.SIGTERM)
                    output = p.communicate(timeout=LAUNCH_TIMEOUT_S)[0]
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            for r in (0, 1):
                path = os.path.join(out, "sig_%d" % r)
                check(os.path.exists(path),
                      "%s: rank %d got no SIGTERM; output:\n%s" %
                      (name, r, output.decode(errors="replace")[-2000:]))
                with open(path) as f:
                    check(f.read() == str(int(signal.SIGTERM)),
                          "%s: rank %d got another signal" % (name, r))
            codes[name] = p.returncode
        check(codes["torchrun"] != 0, "torchrun exited 0 after SIGTERM")
        check(codes["ddprun"] == 128 + signal.SIGTERM,
              "ddprun exited %d after SIGTERM, expected 143" % codes["ddprun"])
        print("OK: SIGTERM forwarded to both ranks by both launchers "
              "(exit: torchrun %d, ddprun %d)" % (codes["torchrun"],
                                                   codes["ddprun"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def file_timer(args):
    """torch's FileTimer (TORCHELASTIC_ENABLE_FILE_TIMER=1): a worker whose
    `with expires(after=1)` block sleeps 6 s (timer_worker.py, torch's own
    FileTimerClient) is killed with SIGKILL under both launchers, well
    before its sleep ends. ddprun exits 1 with the worker's exitcode -9 in
    the failure table, as torchrun 1.13; newer torchruns may SIGKILL
    themselves too after reaping (their FileTimerServer does), which only
    changes torchrun's own exit status."""
    tmp = tempfile.mkdtemp(prefix="ddprun_compat_timer_")
    try:
        for name in ("torchrun", "ddprun"):
            out = os.path.join(tmp, name)
            os.makedirs(out)
            env = base_env(out)
            env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1"
            prefix = (torchrun_cmd(tmp, args.shared, env)
                      if name == "torchrun" else [args.ddprun])
            flags = ["--standalone", "--nproc_per_node=1"]
            try:
                with torchrun_port_lock(flags if name == "torchrun" else []):
                    p = subprocess.run(
                        prefix + flags + [os.path.join(HERE, "timer_worker.py")],
                        env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=LAUNCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise Failure("%s did not end the job in %d s" %
                              (name, LAUNCH_TIMEOUT_S))
            ended = time.time()
            output = p.stdout.decode(errors="replace")
            started = os.path.join(out, "started_0")
            check(os.path.exists(started),
                  "%s: the worker did not start:\n%s" % (name, output[-3000:]))
            with open(started) as f:
                took = ended - float(f.read())
            check(not os.path.exists(os.path.join(out, "survived_0")),
                  "%s: the worker outlived its expired scope:\n%s" %
                  (name, output[-3000:]))
            check(took < 5.5, "%s ended %.1f s after the scope began (the "
                  "sleep is 6 s)" % (name, took))
            allowed = (1,) if name == "ddprun" else (1, -signal.SIGKILL)
            check(p.returncode in allowed, "%s exited %d:\n%s" %
                  (name, p.returncode, output[-3000:]))
            if p.returncode == 1:
                check("  exitcode  : -9 (pid: " in output,
                      "%s: no SIGKILL in the failure table:\n%s" %
                      (name, output[-3000:]))
            print("%s: worker killed %.1f s after its scope began (exit %d)" %
                  (name, took, p.returncode))
        print("OK: the expired scope's worker is killed under both launchers")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=["ddp_standalone", "ddp_static",
                                         "env_standalone", "env_static",
                                         "env_legacy", "env_restart",
                                         "signal_forward", "failure_plain",
                                         "failure_record", "env_accelerate",
                                         "ddp_accelerate", "env_deepspeed",
                                         "ddp_deepspeed", "file_timer"])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--shared", required=True)
    args = parser.parse_args()
    global TORCH
    TORCH = torch_version()
    if TORCH is None:
        return skip_unless_ci("%s has no torch" % PYTHON)
    try:
        if args.case == "ddp_standalone":
            ddp_run(args, ["--standalone", "--nproc_per_node=2"])
        elif args.case == "ddp_static":
            ddp_run(args, ["--nnodes=1", "--nproc_per_node=2"])
        elif args.case == "env_standalone":
            side_by_side(args, ["--standalone", "--nproc_per_node=2"])
        elif args.case == "env_static":
            side_by_side(args, ["--nnodes=1", "--nproc_per_node=2"],
                         static=True)
        elif args.case == "env_restart":
            side_by_side(args, ["--standalone", "--nproc_per_node=2"],
                         restart=True)
        elif args.case == "signal_forward":
            signal_forward(args)
        elif args.case == "file_timer":
            file_timer(args)
        elif args.case == "env_legacy":
            side_by_side(args, ["--nproc_per_node=2"], legacy=True)
        elif args.case == "env_accelerate":
            accelerate_side_by_side(args)
        elif args.case == "ddp_accelerate":
            ddp_run(args, ["--multi_gpu", "--num_processes=2"],
                    launcher=os.path.join(os.path.dirname(args.ddprun),
                                          "ddprun-accelerate"))
        elif args.case == "env_deepspeed":
            deepspeed_contract(args)
        elif args.case == "ddp_deepspeed":
            ddp_run(args, ["--num_gpus=2", "--master_port=%d" % free_port()],
                    launcher=os.path.join(os.path.dirname(args.ddprun),
                                          "ddprun-deepspeed"),
                    local_rank_arg=True)
        else:
            failure_report(args, record=args.case == "failure_record")
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
