#!/usr/bin/python3
"""DeepSpeed's launcher tests as conformance cases for ddprun-deepspeed.

Sources (deepspeedai/DeepSpeed): tests/unit/launcher/test_run.py
("run::": resource filters, hostfiles, flag conflicts, as the command lines
that reach them), test_multinode_runner.py ("runner::"), test_user_args.py
("user_args::"), and deepspeed/launcher/runner.py / launch.py ("runner.py").
DeepSpeed's tests call the runner's functions; each case here is the
`deepspeed` command line that runs the same resolution, and the expectation
is what the workers then get (launch.py: CUDA_VISIBLE_DEVICES = the node's
slots, WORLD_SIZE, CROSS_RANK, ...), read back from the real workers.

Hosts that are not this host are started through scripts/fake_ssh/ssh,
which runs the node's command here with sh (no remote host, loopback only):
the same command line ddprun-deepspeed gives OpenSSH. No deepspeed is
installed, so there is no reference run; the expectations are DeepSpeed's.

Usage: deepspeed_cases.py --bin BUILD/bin [CASE...]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SCRIPTS, Case, check, main  # noqa: E402

FAKE_SSH = os.path.join(SCRIPTS, "fake_ssh")
TWO_HOSTS = "worker-0 slots=4\nworker-1 slots=4\n"
ONE_HOST = "worker-0 slots=4\n"


def ssh_env(ctx):
    return {"PATH": FAKE_SSH + os.pathsep + os.environ["PATH"],
            "FAKE_SSH_LOG": os.path.join(ctx.tmp, "ssh.log")}


def ranks(r):
    """Every worker's record (args_dump.py), by RANK."""
    out = {}
    for name in os.listdir(r.ctx.out):
        if name.endswith(".json"):
            with open(os.path.join(r.ctx.out, name)) as f:
                d = json.load(f)
            out[int(d["env"]["RANK"])] = d
    return out


def layout(*nodes):
    """The job has len(nodes) nodes; node i's workers see
    CUDA_VISIBLE_DEVICES == nodes[i] (its slots) and there is one worker
    per slot; ranks follow the node order; --local_rank=LOCAL_RANK first
    (launch.py: LOCAL_RANK = RANK % the node's process count)."""
    def expect(r):
        check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))
        got = ranks(r)
        world = sum(len(n.split(",")) for n in nodes)
        check(sorted(got) == list(range(world)),
              "ranks %s, expected 0..%d" % (sorted(got), world - 1))
        rank = 0
        for node, slots in enumerate(nodes):
            local = len(slots.split(","))
            for _ in range(local):
                e, argv = got[rank]["env"], got[rank]["argv"]
                want = {"WORLD_SIZE": str(world), "CROSS_RANK": str(node),
                        "CROSS_SIZE": str(len(nodes)),
                        "LOCAL_SIZE": str(local),
                        "LOCAL_RANK": str(rank % local),
                        "CUDA_VISIBLE_DEVICES": slots}
                have = {k: e.get(k) for k in want}
                check(have == want, "rank %d: %r, expected %r" %
                      (rank, have, want))
                check(argv[:1] == ["--local_rank=%d" % (rank % local)],
                      "rank %d argv %r" % (rank, argv))
                rank += 1
    return expect


def rejected(r):
    """runner.py raises (ValueError) before anything starts."""
    check(r.rc == 2 and "ddprun-deepspeed: error: " in r.out,
          "exit %d, expected a usage error (exit 2):\n%s" %
          (r.rc, r.out[-1500:]))
    check(not ranks(r), "workers ran: %s" % sorted(ranks(r)))
    log = os.path.join(r.ctx.tmp, "ssh.log")
    check(not os.path.exists(log), "a host was contacted over ssh")


def argv_of_every_rank(r, world, argv):
    check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))
    got = ranks(r)
    check(sorted(got) == list(range(world)), "ranks %s" % sorted(got))
    for k, d in got.items():
        check(d["argv"] == argv, "rank %d argv %r" % (k, d["argv"]))


def dump(ctx, *args):
    return [ctx.script("args_dump.py")] + list(args)


def with_hosts(text, *flags, master=True):
    """-H HOSTFILE (written with `text`) + flags + the script."""
    def argv(ctx):
        hostfile = ctx.write("hostfile", text)
        extra = ["--master_addr=127.0.0.1",
                 "--master_port=%d" % ctx.port] if master else []
        return ["-H", hostfile] + extra + [f for f in flags if f] + dump(ctx)
    return argv


def filt(name, source, text, flag, spec, expect):
    return Case(name, source, with_hosts(text, flag, spec), expect,
                launcher="ddprun-deepspeed", env=ssh_env)


def prompt_received(prompt):
    def expect(r):
        check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))
        check("ARG PARSE SUCCESS" in r.out, "no ARG PARSE SUCCESS")
        got = ranks(r)
        check(got and got[0]["argv"] == ["--local_rank=0", "--prompt",
                                          prompt],
              "argv %r" % (got[0]["argv"] if got else None))
    return expect


PROMPTS = ['"I am 6\' tall"', "'I am 72\" tall'",
           "'\"translate English to Romanian: \"'",
           'I\'m going to tell them "DeepSpeed is the best"']

CASES = [
    # --- test_run.py: parse_resource_filter through -i / -e -------------
    Case("run_parser_mutual_exclusive",
         "test_run.py::test_parser_mutual_exclusive",
         with_hosts(TWO_HOSTS, "-i", "worker-0", "-e", "worker-1"), rejected,
         launcher="ddprun-deepspeed", env=ssh_env),
    filt("run_local_all", "test_run.py::test_parser_local (no filter)",
         ONE_HOST, "--num_nodes=1", "", layout("0,1,2,3")),
    filt("run_local_exclude_1", "test_run.py::test_parser_local (-e :1)",
         ONE_HOST, "-e", "worker-0:1", layout("0,2,3")),
    filt("run_local_exclude_12", "test_run.py::test_parser_local (-e :1,2)",
         ONE_HOST, "-e", "worker-0:1,2", layout("0,3")),
    filt("run_local_include_1", "test_run.py::test_parser_local (-i :1)",
         ONE_HOST, "-i", "worker-0:1", layout("1")),
    filt("run_local_include_11", "test_run.py::test_parser_local (-i :1,1)",
         ONE_HOST, "-i", "worker-0:1,1", layout("1")),
    filt("run_local_include_twice",
         "test_run.py::test_parser_local (-i :1@worker-0:0,1)",
         ONE_HOST, "-i", "worker-0:1@worker-0:0,1", layout("0,1")),
    filt("run_local_include_host",
         "test_run.py::test_parser_local (-i worker-0)",
         ONE_HOST, "-i", "worker-0", layout("0,1,2,3")),
    filt("run_local_exclude_host",
         "test_run.py::test_parser_local (-e worker-0: nothing left)",
         ONE_HOST, "-e", "worker-0", rejected),
    filt("run_local_exclude_all",
         "test_run.py::test_parser_local (-e worker-0:0,1,2,3)",
         ONE_HOST, "-e", "worker-0:0,1,2,3", rejected),
    filt("run_multinode_all", "test_run.py::test_parser_multinode (none)",
         TWO_HOSTS, "--num_nodes=2", "", layout("0,1,2,3", "0,1,2,3")),
    filt("run_multinode_include",
         "test_run.py::test_parser_multinode (-i worker-1:0,3)",
         TWO_HOSTS, "-i", "worker-1:0,3", layout("0,3")),
    filt("run_multinode_exclude_host",
         "test_run.py::test_parser_multinode (-e worker-1)",
         TWO_HOSTS, "-e", "worker-1", layout("0,1,2,3")),
    filt("run_multinode_exclude_parts",
         "test_run.py::test_parser_multinode (-e w0:0,1@w1:3)",
         TWO_HOSTS, "-e", "worker-0:0,1@worker-1:3",
         layout("2,3", "0,1,2")),
    filt("run_incl_excl_host",
         "test_run.py::test_parse_inclusion_exclusion (-i worker-0)",
         TWO_HOSTS, "-i", "worker-0", layout("0,1,2,3")),
    filt("run_incl_excl_docstring",
         "test_run.py::test_parse_inclusion_exclusion (w0@w1:0,2)",
         TWO_HOSTS, "-i", "worker-0@worker-1:0,2",
         layout("0,1,2,3", "0,2")),
    filt("run_incl_excl_exclude_slot",
         "test_run.py::test_parse_inclusion_exclusion (-e worker-0:1)",
         TWO_HOSTS, "-e", "worker-0:1", layout("0,2,3", "0,1,2,3")),
] + [
    filt("run_incl_excl_error_%s_%s" % (flag[1], spec.replace(":", "_")
                                        .replace(",", "_")),
         "test_run.py::test_parse_inclusion_exclusion_errors (%s %s)" %
         (flag, spec), ONE_HOST, flag, spec, rejected)
    for spec in ("worker-0:4", "worker-0:99", "worker-0:0,4")
    for flag in ("-i", "-e")
] + [
    filt("run_incl_excl_error_jeff",
         "test_run.py::test_parse_inclusion_exclusion_errors (-i jeff)",
         ONE_HOST, "-i", "jeff", rejected),
    # main() turns CUDA_VISIBLE_DEVICES=0,2 into --include localhost:0,2.
    Case("run_visible_devices",
         "test_run.py::test_visible_devices_resolve_to_the_requested_slots",
         lambda c: ["--master_port=%d" % c.port] + dump(c), layout("0,2"),
         launcher="ddprun-deepspeed",
         env=lambda c: {"CUDA_VISIBLE_DEVICES": "0,2"}),
] + [
    filt("run_parser_error_%s_%s" % (flag[1], spec.replace(":", "_")
                                     .replace("@", "_").replace(",", "_")),
         "test_run.py::test_parser_errors (%s %s)" % (flag, spec),
         TWO_HOSTS, flag, spec, rejected)
    for flag, spec in (("-i", "jeff"), ("-e", "jeff"), ("-i", "worker-1:4"),
                       ("-e", "worker-1:4"),
                       ("-e", "worker-1@worker-0:1@5"))
] + [
    Case("run_num_plus_%d" % i,
         "test_run.py::test_num_plus_parser (%s)" % line,
         lambda c, line=line: line.split() + dump(c), rejected,
         launcher="ddprun-deepspeed", env=ssh_env)
    for i, line in enumerate(["--num_nodes 1 -i localhost",
                              "--num_nodes 1 --num_gpus 1 -i localhost",
                              "--num_gpus 1 -i localhost",
                              "--num_nodes 1 -e localhost",
                              "--num_nodes 1 --num_gpus 1 -e localhost",
                              "--num_gpus 1 -e localhost"])
] + [
    # Blank lines, comments and indentation; four hosts, this one third.
    Case("run_hostfile_good", "test_run.py::test_hostfile_good",
         with_hosts("\n    worker-1 slots=2\n    worker-2 slots=2\n\n"
                    "    localhost slots=1\n    123.23.12.10 slots=2\n\n"
                    "    #worker-1 slots=3\n    # this is a comment\n\n    "),
         layout("0,1", "0,1", "0", "0,1"), launcher="ddprun-deepspeed",
         env=ssh_env),
] + [
    Case("run_hostfile_bad_%s" % what, "test_run.py::test_hostfiles_bad (%s)"
         % what, with_hosts(text), rejected, launcher="ddprun-deepspeed",
         env=ssh_env)
    for what, text in (
        ("duplicate", "worker-1 slots=2\nworker-2 slots=1\n"
                      "worker-1 slots=1\n"),
        ("whitespace", "    this is bad slots=1\n"),
        ("no_slots", "    missingslots\n"),
        ("empty", "\n    \n"),
        ("mixed", "    worker-1 slots=2\n    this is bad slots=1\n"
                  "    worker-2 slots=4\n    missingslots\n\n"))
] + [
    # --- test_multinode_runner.py: what reaches the command line --------
    # DeepSpeed builds `mpirun ... -mca btl_tcp_if_include eth1`;
    # ddprun-deepspeed starts nodes over OpenSSH and refuses MPI arguments.
    Case("runner_btl_nic_openmpi",
         "test_multinode_runner.py::test_btl_nic_openmpi_runner",
         with_hosts(TWO_HOSTS, "--launcher", "openmpi", "--launcher_arg",
                    "-mca btl_tcp_if_include eth1"), layout("0,1,2,3",
                                                            "0,1,2,3"),
         launcher="ddprun-deepspeed", env=ssh_env,
         known=("MPI launchers' --launcher_args are exit 2 (no mpirun)",
                "error: --launcher_args '-mca btl_tcp_if_include eth1': "
                "with --launcher=openmpi")),
    Case("runner_slurm",
         "test_multinode_runner.py::test_slurm_runner",
         with_hosts(TWO_HOSTS, "--launcher", "slurm"),
         layout("0,1,2,3", "0,1,2,3"), launcher="ddprun-deepspeed",
         env=ssh_env, known=("--launcher=slurm is exit 2 (run srun yourself)",
                "--launcher=slurm is not supported by ddprun-deepspeed")),
] + [
    Case("runner_rejects_unsupported_filter%s" % ("_force_multi" if fm
                                                   else ""),
         "test_multinode_runner.py::test_runner_main_rejects_unsupported_"
         "filter%s" % (" (--force_multi)" if fm else ""),
         lambda c, fm=fm: (["--force_multi"] if fm else []) + [
             "--hostfile", c.write("hostfile", TWO_HOSTS), "--no_ssh_check",
             "--master_addr", "127.0.0.1", "--launcher", "slurm",
             "--include", "worker-1:0,2"] + dump(c), rejected,
         launcher="ddprun-deepspeed", env=ssh_env)
    for fm in (False, True)
] + [
    # --- test_user_args.py ---------------------------------------------
    Case("user_args_%d%s" % (i, "_multi" if multi else ""),
         "test_user_args.py::test_user_args[%s-%s]" % (multi, p),
         lambda c, p=p, multi=multi: (["--force_multi"] if multi else []) +
         ["--num_nodes", "1", "--num_gpus", "1",
          "--master_port=%d" % c.port] + dump(c, "--prompt", p),
         prompt_received(p), launcher="ddprun-deepspeed", env=ssh_env)
    for i, p in enumerate(PROMPTS) for multi in (True, False)
] + [
    Case("user_args_bash_string",
         "test_user_args.py::test_bash_string_args",
         lambda c: ["-c", "ARGS=\"--prompt 'DeepSpeed is the best'\"\n"
                    "echo ${ARGS}|xargs %s --num_nodes 1 --num_gpus 1 "
                    "--master_port=%d %s" % (
                        os.path.join(c.bin, "ddprun-deepspeed"), c.port,
                        c.script("args_dump.py"))],
         prompt_received("DeepSpeed is the best"), launcher="/bin/bash"),
    # add_export quotes a value with shell characters and leaves a plain
    # one alone: what a remote node's worker receives from .deepspeed_env.
    Case("user_args_export_special_characters",
         "test_user_args.py::test_add_export_with_special_characters",
         lambda c: (c.write(".deepspeed_env",
                            "SLURM_JOB_CPUS_PER_NODE=64(x2)\n"
                            "PLAIN_PATH=/usr/local/lib/python3.9/x\n"),
                    with_hosts("worker-0 slots=1\nworker-1 slots=1\n")(c))[1],
         lambda r: (layout("0", "0")(r), [check(
             d["env"].get("SLURM_JOB_CPUS_PER_NODE") == "64(x2)" and
             d["env"].get("PLAIN_PATH") == "/usr/local/lib/python3.9/x",
             "rank %d got %r" % (k, {x: d["env"].get(x) for x in (
                 "SLURM_JOB_CPUS_PER_NODE", "PLAIN_PATH")}))
             for k, d in ranks(r).items()]),
         launcher="ddprun-deepspeed",
         env=lambda c: dict(ssh_env(c), HOME=c.tmp)),
    # --- runner.py / launch.py facts ------------------------------------
    Case("runnerpy_log_level_quiet",
         "runner.py: --log_level and -q (0.17.6), --venv_script (0.17.1)",
         lambda c: (c.write("venv.sh", "export FROM_VENV_SCRIPT=yes\n"),
                    ["-q", "--log_level=warning", "--venv_script",
                     os.path.join(c.tmp, "venv.sh")] +
                    with_hosts("worker-0 slots=1\nworker-1 slots=1\n")(c))[1],
         lambda r: (layout("0", "0")(r), [check(
             d["env"].get("FROM_VENV_SCRIPT") == "yes",
             "rank %d: the venv script was not sourced" % k)
             for k, d in ranks(r).items()]),
         launcher="ddprun-deepspeed", env=ssh_env),
    Case("runnerpy_master_port_multinode",
         "runner.py/launch.py: MASTER_PORT is --master_port on every node",
         with_hosts("worker-0 slots=1\nworker-1 slots=1\n"),
         lambda r: (layout("0", "0")(r), [check(
             d["env"]["MASTER_PORT"] == str(r.ctx.port),
             "rank %d MASTER_PORT %s, --master_port %d" %
             (k, d["env"]["MASTER_PORT"], r.ctx.port))
             for k, d in ranks(r).items()]),
         launcher="ddprun-deepspeed", env=ssh_env),
    Case("runnerpy_no_local_rank",
         "launch.py: --no_local_rank passes the arguments untouched",
         lambda c: ["--num_gpus=2", "--master_port=%d" % c.port,
                    "--no_local_rank"] + dump(c, "a", "b c"),
         lambda r: argv_of_every_rank(r, 2, ["a", "b c"]),
         launcher="ddprun-deepspeed"),
]

NOT_APPLICABLE = [
    ("test_run.py::test_visible_devices_are_rejected_when_the_device_count_"
     "is_masked", "mocks the accelerator's device count (GPU counts)"),
    ("test_multinode_runner.py::test_pdsh_runner",
     "pdsh's command and PDSH_RCMD_TYPE: ddprun-deepspeed starts nodes over "
     "OpenSSH (README)"),
    ("test_multinode_runner.py::test_openmpi_runner, test_mpich_runner, "
     "test_mvapich_runner, test_impi_binding_without_local_numactl",
     "the mpirun command a runner class builds: ddprun-deepspeed builds "
     "none (MPI launchers start nodes over OpenSSH); their --launcher_args: "
     "runner_btl_nic_openmpi"),
    ("test_multinode_runner.py::test_btl_nic_two_dashes_openmpi_runner",
     "same command line as test_btl_nic_openmpi_runner"),
    ("test_multinode_runner.py::test_slurm_runner_resource_filter, "
     "test_slurm_runner_rejects_unsupported_filter, "
     "test_slurm_runner_num_nodes_and_gpus",
     "srun's command line: --launcher=slurm is exit 2 (runner_slurm)"),
    ("test_multinode_runner.py::test_validate_active_resources_default_is_"
     "a_no_op", "a Python class hook, no command line"),
    ("test_ds_arguments.py (all 9 cases)",
     "deepspeed.add_config_arguments and deepspeed.utils.numa, library "
     "functions of the training script, not the launcher; "
     "--bind_cores_to_rank is exit 2 (README)"),
]

if __name__ == "__main__":
    sys.exit(main("deepspeed", CASES, NOT_APPLICABLE))
