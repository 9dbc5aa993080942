#!/usr/bin/python3
"""accelerate's launcher tests as conformance cases for ddprun-accelerate.

Sources (huggingface/accelerate, main of 2026-07-24): tests/test_cli.py
("cli::"), tests/test_launch.py ("launch::"), the configs of
tests/test_configs/ (their keys and values below, as `accelerate config`
wrote them for each version), and src/accelerate/commands/launch.py /
utils/launch.py ("launch.py"). accelerate's tests call launch_command() on
a parsed namespace; each case here is the `accelerate launch` command line
that does the same, run with real processes; the worker (scripts/
args_dump.py) records what it got. No accelerate is installed, so there is
no reference run; the expectations are accelerate's.

Usage: accelerate_cases.py --bin BUILD/bin [CASE...]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Case, check, main  # noqa: E402


# tests/test_configs/*.yaml (accelerate main, 2026-07-24).
CONFIGS = {
    "0_11_0": """compute_environment: LOCAL_MACHINE
deepspeed_config: {}
distributed_type: 'NO'
fsdp_config: {}
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
use_cpu: false
""",
    "0_12_0": """compute_environment: LOCAL_MACHINE
deepspeed_config: {}
distributed_type: 'NO'
downcast_bf16: 'no'
fsdp_config: {}
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
use_cpu: false
""",
    "latest": """compute_environment: LOCAL_MACHINE
deepspeed_config: {}
distributed_type: 'NO'
downcast_bf16: 'no'
fsdp_config: {}
gpu_ids: all
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
megatron_lm_config: {}
mixed_precision: 'no'
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
use_cpu: false
tpu_name: 'test-tpu'
tpu_zone: 'us-central1-a'
commands: null
command_file: tests/test_samples/test_command_file.sh
""",
    "latest_fsdp": """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_ignored_modules: null
  fsdp_offload_params: false
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_use_orig_params: true
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
""",
    "validate_launch_cmd": """compute_environment: LOCAL_MACHINE
debug: true
num_processes: 1
distributed_type: 'NO'
fsdp_config:
  fsdp_sync_module_states: false
deepspeed_config:
  deepspeed_config_file: path/to/be/ignored
""",
    "invalid_keys": """compute_environment: LOCAL_MACHINE
deepspeed_config: {}
distributed_type: 'NO'
downcast_bf16: 'no'
fsdp_config: {}
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
use_cpu: false
invalid_key: "invalid_value"
another_invalid_key: "another_invalid_value"
""",
    "0_28_0_mpi": """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: 29500
main_training_function: main
mixed_precision: 'no'
mpirun_config:
  mpirun_hostfile: /home/user/hostfile
num_machines: 4
num_processes: 16
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
""",
}


def records(r):
    out = []
    for name in sorted(os.listdir(r.ctx.out)):
        if name.endswith(".json"):
            with open(os.path.join(r.ctx.out, name)) as f:
                out.append(json.load(f))
    return out


def processes(n, **want):
    """Exit 0, n workers ran (ranks 0..n-1 when n > 1), each with the
    variables in `want` (name -> value; None = absent)."""
    def expect(r):
        check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))
        got = records(r)
        check(len(got) == n, "%d workers ran, expected %d" % (len(got), n))
        if n > 1:
            check(sorted(int(d["env"]["RANK"]) for d in got) ==
                  list(range(n)), "ranks %s" % [d["env"].get("RANK")
                                                for d in got])
        for d in got:
            for k, v in want.items():
                check(d["env"].get(k) == v, "%s is %r, expected %r" %
                      (k, d["env"].get(k), v))
    return expect


def rejected_naming(*words):
    def expect(r):
        check(r.rc != 0, "exit 0, expected an error:\n%s" % r.out[-1500:])
        check(not records(r), "workers ran")
        for w in words:
            check(w in r.out, "the error does not name %r:\n%s" %
                  (w, r.out[-1500:]))
    return expect


def config(name, *extra):
    def argv(ctx):
        path = ctx.write(name + ".yaml", CONFIGS[name])
        return ["--config_file", path] + list(extra) + [
            ctx.script("args_dump.py")]
    return argv


def no_hyphen_duplicates(r):
    """accelerate launch -h names each option once, with underscores (a
    hyphenated spelling of an underscore option is not listed; the one
    `--num-processes` allowed is in accelerate's own docstring)."""
    check(r.rc == 0, "--help exit %d" % r.rc)
    names = set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9]+(?:_[a-z0-9]+)+)",
                           r.out, re.M))
    check(names, "no underscore options in --help:\n%s" % r.out[:1000])
    for n in sorted(names):
        bad = "--" + n.replace("_", "-")
        limit = 1 if bad == "--num-processes" else 0
        check(r.out.count(bad) <= limit, "%s listed in --help" % bad)


def master_port_is(r, port_of):
    for d in records(r):
        check(d["env"]["MASTER_PORT"] == str(port_of(r)),
              "rank %s MASTER_PORT %s, expected %s" % (
                  d["env"]["RANK"], d["env"]["MASTER_PORT"], port_of(r)))


def auto_port(r):
    processes(2)(r)
    for d in records(r):
        p = d["env"]["MASTER_PORT"]
        check(p.isdigit() and p != "0", "MASTER_PORT %r" % p)


def stderr_flood(r):
    check(r.rc != 0, "exit 0 although the script raised")
    check("the real cause" in r.out, "the script's exception is not shown")
    floods = r.out.count("x" * 40)
    check(floods == 200000, "%d of 200000 stderr lines reached the "
          "console" % floods)


FLOOD = ("import sys\nfor _ in range(200000):\n"
         "    print('x' * 40, file=sys.stderr)\n"
         "raise ValueError('the real cause')\n")

USE_DEEPSPEED = ("--use_deepspeed is exit 2 (use ddprun-deepspeed)",
                 "--use_deepspeed: accelerate's DeepSpeed (use "
                 "ddprun-deepspeed) launch is not supported")


def Acc(*args, **kwargs):
    return Case(*args, launcher="ddprun-accelerate", **kwargs)


CASES = [
    # --- test_cli.py::AccelerateLauncherTester ---------------------------
    Acc("cli_no_config", "test_cli.py::test_no_config",
         lambda c: ["--monitor_interval", "0.1", c.script("args_dump.py")],
         processes(1, ACCELERATE_MIXED_PRECISION="no")),
    Acc("cli_config_0_11_0", "test_cli.py::test_config_compatibility "
         "(0_11_0.yaml)", config("0_11_0"),
         processes(1, ACCELERATE_MIXED_PRECISION="no")),
    Acc("cli_config_0_12_0", "test_cli.py::test_config_compatibility "
         "(0_12_0.yaml)", config("0_12_0"),
         processes(1, ACCELERATE_DOWNCAST_BF16=None)),
    Acc("cli_config_latest", "test_cli.py::test_config_compatibility "
         "(latest.yaml)", config("latest"), processes(1)),
    # FSDP with one process: accelerate's multi-GPU launcher (torchrun),
    # prepare_multi_gpu_env's FSDP_* variables.
    Acc("cli_config_latest_fsdp", "test_cli.py::test_config_compatibility "
         "(latest_fsdp.yaml)", config("latest_fsdp"),
         processes(1, RANK="0", WORLD_SIZE="1", ACCELERATE_USE_FSDP="true",
                   FSDP_SHARDING_STRATEGY="FULL_SHARD",
                   FSDP_TRANSFORMER_CLS_TO_WRAP="BertLayer",
                   FSDP_SYNC_MODULE_STATES="true")),
    Acc("cli_config_validate_launch_cmd",
         "test_cli.py::test_config_compatibility (validate_launch_cmd.yaml)",
         config("validate_launch_cmd"),
         processes(1, ACCELERATE_DEBUG_MODE="true")),
    Acc("cli_invalid_keys", "test_cli.py::test_invalid_keys",
         config("invalid_keys"),
         rejected_naming("another_invalid_key", "invalid_key")),
    # accelerate runs `mpirun -f /home/user/hostfile -ppn 4 -n 16 python
    # SCRIPT --cpu`; ddprun-accelerate runs no mpirun.
    Acc("cli_mpi_multicpu_config", "test_cli.py::test_mpi_multicpu_config_"
         "cmd", lambda c: config("0_28_0_mpi")(c) + ["--cpu"],
         processes(16), known=("a config's mpirun_config is exit 2 (no mpirun "
                          "launch)", "accelerate's mpirun launch is not "
                          "supported")),
    # Command line over config: 2 processes, debug from the config, the
    # DeepSpeed config file accepted on a launch that is not DeepSpeed's.
    Acc("cli_validate_launch_command",
         "test_cli.py::test_validate_launch_command",
         lambda c: ["--num-processes", "2", "--deepspeed_config_file",
                    "path/to/be/accepted", "--config-file",
                    c.write("v.yaml", CONFIGS["validate_launch_cmd"]),
                    c.script("args_dump.py")],
         processes(1, ACCELERATE_DEBUG_MODE="true")),
    # --- test_cli.py::LaunchArgTester ----------------------------------
    Acc("cli_hyphen", "test_cli.py::test_hyphen (--multi-gpu "
         "--num-processes 4)",
         lambda c: ["--multi-gpu", "--num-processes", "4",
                    c.script("args_dump.py")], processes(4,
                                                          WORLD_SIZE="4")),
    Acc("cli_hyphen_config_file", "test_cli.py::test_hyphen "
         "(--config-file)",
         lambda c: ["--config-file", c.write("t.yaml", CONFIGS["latest"]),
                    c.script("args_dump.py")], processes(1)),
    Acc("cli_underscore", "test_cli.py::test_underscore (--multi_gpu "
         "--num_processes 4)",
         lambda c: ["--multi_gpu", "--num_processes", "4",
                    c.script("args_dump.py")], processes(4,
                                                          WORLD_SIZE="4")),
    Acc("cli_underscore_config_file", "test_cli.py::test_underscore "
         "(--config_file)",
         lambda c: ["--config_file", c.write("t.yaml", CONFIGS["latest"]),
                    c.script("args_dump.py")], processes(1)),
    # The mixes: accelerate parses them; with --use_deepspeed it then runs
    # DeepSpeed's launcher, which ddprun-accelerate leaves to
    # ddprun-deepspeed.
    Acc("cli_hyphen_mix", "test_cli.py::test_hyphen (--use-deepspeed "
         "--use-fsdp)",
         lambda c: ["--multi-gpu", "--use-deepspeed", "--use-fsdp",
                    "--num_processes", "4", c.script("args_dump.py")],
         processes(4), known=USE_DEEPSPEED),
    Acc("cli_underscore_mix", "test_cli.py::test_underscore "
         "(--use_deepspeed --use_fsdp)",
         lambda c: ["--multi_gpu", "--use_deepspeed", "--use_fsdp",
                    "--num-processes", "4", c.script("args_dump.py")],
         processes(4), known=USE_DEEPSPEED),
    Acc("cli_duplicate_entities", "test_cli.py::test_duplicate_entities",
         lambda c: ["-h"], no_hyphen_duplicates),
    # --- test_launch.py ------------------------------------------------
    Acc("launch_auto_port_selection",
         "test_launch.py::test_auto_port_selection (--main_process_port 0)",
         lambda c: ["--multi_gpu", "--num_processes", "2",
                    "--main_process_port", "0", c.script("args_dump.py")],
         auto_port),
    Acc("launch_child_stderr_written_through",
         "test_launch.py::TestSimpleLauncher::test_child_stderr_is_written_"
         "through_and_attached",
         lambda c: ["--cpu", "--num_processes", "1", "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no",
                    "--num_cpu_threads_per_process", "1",
                    c.write("child.py", FLOOD)], stderr_flood),
    # --- launch.py: two machines on this host ---------------------------
    Acc("launchpy_two_machines_main_process_port",
         "launch.py: --main_process_port is every worker's MASTER_PORT",
         lambda c: [["--multi_gpu", "--num_machines", "2", "--machine_rank",
                     str(n), "--num_processes", "2", "--main_process_ip",
                     "127.0.0.1", "--main_process_port", str(c.port),
                     c.script("args_dump.py")] for n in (0, 1)],
         lambda r: (processes(2)(r), master_port_is(r, lambda r: r.ctx.port))),
]

NOT_APPLICABLE = [
    ("test_cli.py::test_config_compatibility (sagemaker, fp8, mpi, invalid)",
     "excluded by accelerate's own test; mpi and invalid: cases "
     "cli_mpi_multicpu_config, cli_invalid_keys"),
    ("test_cli.py::test_accelerate_test",
     "`accelerate test` runs accelerate's own test script, not a launch"),
    ("test_cli.py::test_notebook_launcher",
     "notebook_launcher is a Python API; needs several devices"),
    ("test_cli.py::ClusterConfigTester (3 cases)",
     "config dataclasses in-process; SageMaker: ddprun-accelerate runs no "
     "SageMaker jobs (its keys are unknown keys, exit 2)"),
    ("test_cli.py::TpuConfigTester (9 cases)",
     "`accelerate tpu-config` (gcloud), not a launch"),
    ("test_cli.py::ModelEstimatorTester (9 cases)",
     "`accelerate estimate-memory`, not a launch"),
    ("test_cli.py::ToFSDP2Tester (7 cases)",
     "`accelerate to-fsdp2` (config conversion), not a launch"),
]

if __name__ == "__main__":
    sys.exit(main("accelerate", CASES, NOT_APPLICABLE))
