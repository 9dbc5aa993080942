#!/usr/bin/python3
"""torch's launcher tests as conformance cases for ddprun and ddprun-launch.

Sources (pytorch/pytorch): test/distributed/launcher/test_run.py ("run::"),
launch_test.py ("launch::"), api_test.py ("api::", the elastic_launch API
with etcd: each case here is its command-line equivalent with the c10d
backend, which ddprun has), and torch/distributed/run.py ("run.py::", facts
its documentation states). The workers in scripts/ are our rewrites of
torch's bin/ scripts. Every case with `reference` also runs under the real
torchrun (or torch.distributed.launch) of $PYTHON_EXEC and must pass there
too.

Usage: torch_cases.py --bin BUILD/bin [--group PREFIX] [CASE...]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Case, check, main  # noqa: E402

ANY = (1, 13)  # a reference for every torch this suite meets


def touched(n):
    def expect(r):
        check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))
        got = r.files()
        check(got == {str(i) for i in range(n)},
              "ranks that ran: %s, expected 0..%d" % (sorted(got), n - 1))
    return expect


def succeeds(r):
    check(r.rc == 0, "exit %d:\n%s" % (r.rc, r.out[-2000:]))


def rejected(r):
    """torch raises (ValueError, RuntimeError) before any worker starts."""
    check(r.rc != 0, "exit 0, expected an error:\n%s" % r.out[-1500:])
    check(not r.files(), "workers ran: %s" % sorted(r.files()))


def worker_failed(r):
    """ChildFailedError: exit 1 and the failure summary naming the error."""
    check(r.rc == 1, "exit %d, expected 1:\n%s" % (r.rc, r.out[-2000:]))
    check("raising exception since --fail flag was set" in r.out,
          "the worker's exception is not in the output")
    check("Root Cause" in r.out, "no failure summary")


def launched_flag(expected):
    def expect(r):
        succeeds(r)
        path = os.path.join(r.ctx.tmp, "out.txt")
        check(os.path.exists(path), "the worker wrote no out file")
        with open(path) as f:
            got = f.read()
        check(got == expected, "is_torchelastic_launched() %r" % got)
    return expect


def prefixed_lines(n):
    def expect(r):
        succeeds(r)
        for i in range(n):
            check("[rank%d]: creating " % i in r.out,
                  "no '[rank%d]: creating' line in:\n%s" % (i, r.out[-1500:]))
    return expect


def cpu_count():
    return len(os.sched_getaffinity(0))


def elastic_flags(ctx, extra=()):
    return ["--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
            "--rdzv-endpoint=localhost:%d" % ctx.port] + list(extra) + [
            "--rdzv-id=4242", "--monitor-interval=1", "--start-method=spawn"]


def touch_py(ctx, *extra):
    return [ctx.script("touch_rank.py"), "--touch-file-dir=%s" % ctx.touch] \
        + list(extra)


def touch_sh(ctx):
    return [ctx.script("touch_rank.sh"), ctx.touch]


def api_flags(ctx, nnodes, *extra):
    """get_test_launch_config(): c10d at a free endpoint, monitor 0.1 s, no
    restarts; --no-python: the entrypoint is an executable."""
    return ["--nnodes=%s" % nnodes, "--nproc-per-node=4",
            "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:%d" % ctx.port] \
        + list(extra) + ["--monitor-interval=0.1", "--max-restarts=0",
                         "--no-python"]


# elastic_launch(config, sys.executable)("-u", script, ...).
PYTHON_U = [sys.executable, "-u"]

NPROC_BASE = ["--nnodes=1", "--rdzv-id=77", "--monitor-interval=1",
              "--start-method=spawn", "--no-python"]

CASES = [
    # --- test_run.py ---------------------------------------------------
    Case("run_user_script_python",
         "test_run.py::test_launch_user_script_python",
         lambda c: ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id=99",
                    "--monitor-interval=1", "--start-method=spawn"] +
         touch_py(c), touched(4), reference=ANY),
    Case("run_caffe2_bc",
         "test_run.py::test_launch_user_script_python_caffe2_bc",
         lambda c: ["--nnodes=1", "--nproc-per-node=4",
                    "--monitor-interval=1", "--start-method=spawn",
                    "--master-addr=localhost", "--master-port=%d" % c.port,
                    "--node-rank=0"] + touch_py(c), touched(4),
         reference=ANY),
    Case("run_user_script_bash",
         "test_run.py::test_launch_user_script_bash",
         lambda c: NPROC_BASE + ["--nproc-per-node=4"] + touch_sh(c),
         touched(4), reference=ANY),
    Case("run_bash_with_module",
         "test_run.py::test_launch_user_script_bash (--module)",
         lambda c: NPROC_BASE + ["--nproc-per-node=4", "--module"] +
         touch_sh(c), rejected, reference=ANY, same_rc=False),
    Case("run_default_nproc",
         "test_run.py::test_launch_user_script_default_nproc",
         lambda c: NPROC_BASE + touch_sh(c), touched(1), reference=ANY),
    Case("run_default_nproc_module",
         "test_run.py::test_launch_user_script_default_nproc (--module)",
         lambda c: NPROC_BASE + ["--module"] + touch_sh(c), rejected,
         reference=ANY, same_rc=False),
    Case("run_env_vars",
         "test_run.py::test_launch_with_env_vars",
         lambda c: touch_sh(c), touched(4), reference=ANY,
         env=lambda c: {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "4",
                        "PET_RDZV_ID": "5", "PET_MONITOR_INTERVAL": "1",
                        "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1",
                        "PET_MODULE": "0"}),
    Case("run_env_vars_module",
         "test_run.py::test_launch_with_env_vars (PET_MODULE=1)",
         lambda c: touch_sh(c), rejected, reference=ANY, same_rc=False,
         env=lambda c: {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "4",
                        "PET_RDZV_ID": "5", "PET_MONITOR_INTERVAL": "1",
                        "PET_START_METHOD": "spawn", "PET_NO_PYTHON": "1",
                        "PET_MODULE": "1"}),
    # torch's case mocks torch.accelerator away; this machine has none, so
    # the real launch is the case (expected: the CPUs this process may use,
    # torch._utils.cpu_count()). torch 1.13 counts os.cpu_count() instead:
    # no reference.
    Case("run_nproc_auto",
         "test_run.py::test_nproc_launch_auto_configurations",
         lambda c: NPROC_BASE + ["--nproc-per-node=auto"] + touch_sh(c),
         touched(cpu_count())),
    Case("run_nproc_number",
         "test_run.py::test_nproc_launch_number_configurations",
         lambda c: NPROC_BASE + ["--nproc-per-node=4"] + touch_sh(c),
         touched(4), reference=ANY),
    Case("run_nproc_unknown",
         "test_run.py::test_nproc_launch_unknown_configurations",
         lambda c: NPROC_BASE + ["--nproc-per-node=unknown"] + touch_sh(c),
         rejected, reference=ANY, same_rc=False),
    # The quotes are part of the argument, as torch's test passes it.
    Case("run_elastic",
         "test_run.py::test_launch_elastic",
         lambda c: elastic_flags(c, [
             "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'"]) +
         touch_py(c), touched(4), reference=ANY),
    Case("run_elastic_worker_raise",
         "test_run.py::test_launch_elastic_worker_raise_exception",
         lambda c: elastic_flags(c, [
             "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
             "--max-restarts=0"]) + touch_py(c, "--fail"), worker_failed,
         reference=ANY),
    Case("run_standalone",
         "test_run.py::test_launch_standalone",
         lambda c: ["--nnodes=1", "--nproc-per-node=4", "--standalone",
                    "--monitor-interval=1", "--start-method=spawn"] +
         touch_py(c), touched(4), reference=ANY),
    Case("run_run_path",
         "test_run.py::test_launch_run_path",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=4",
                    "--monitor-interval=1", "--start-method=spawn"] +
         touch_py(c), touched(4), reference=ANY),
    Case("run_elastic_multiple_agents",
         "test_run.py::test_launch_elastic_multiple_agents",
         lambda c: [elastic_flags(c, ["--rdzv_conf=timeout=5"]) +
                    touch_py(c)] * 2, touched(8), reference=ANY),
    Case("run_nnodes_three_parts",
         "test_run.py::test_min_max_nodes_parse ('2:20:30')",
         lambda c: ["--nnodes=2:20:30"] + touch_sh(c), rejected,
         reference=ANY, same_rc=False),
    Case("run_is_torchelastic_launched",
         "test_run.py::test_is_torchelastic_launched",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=1",
                    "--monitor-interval=1",
                    c.script("torchelastic_launched.py"),
                    "--out-file=%s/out.txt" % c.tmp],
         launched_flag("True"), reference=ANY, needs_torch=True),
    Case("run_logs_specs_default",
         "test_run.py::test_is_torchelastic_launched_with_logs_spec_defined",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=1",
                    "--monitor-interval=1", "--logs_specs=default",
                    c.script("torchelastic_launched.py"),
                    "--out-file=%s/out.txt" % c.tmp],
         launched_flag("True"), reference=(2, 3), needs_torch=True),
    Case("run_logs_specs_unknown",
         "test_run.py::test_logs_logs_spec_entrypoint_must_be_defined",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=1",
                    "--monitor-interval=1", "--logs_specs=DOESNOT_EXIST"] +
         touch_sh(c), rejected, reference=(2, 3), same_rc=False),
    Case("run_init_method_tcp",
         "test_run.py::test_init_method_tcp_with_torchelastic",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=4",
                    "--master-addr=localhost", "--master-port=%d" % c.port,
                    "--monitor-interval=1", c.script("init_method.py"),
                    "--init-method=tcp://localhost:%d" % c.port],
         succeeds, reference=ANY, needs_torch=True, timeout=300),
    Case("run_init_method_env",
         "test_run.py::test_init_method_env_with_torchelastic",
         lambda c: ["--run-path", "--nnodes=1", "--nproc-per-node=4",
                    "--master-addr=localhost", "--master-port=%d" % c.port,
                    "--monitor-interval=1", c.script("init_method.py"),
                    "--init-method=env://"],
         succeeds, reference=ANY, needs_torch=True, timeout=300),
    Case("run_capture_logs_prefix",
         "test_run.py::test_capture_logs_using_default_logs_specs",
         lambda c: ["--nnodes=1", "--nproc-per-node=4", "--rdzv-id=7",
                    "--redirect=3", "--tee=3", "--monitor-interval=1",
                    "--start-method=spawn", "--no-python"] + touch_sh(c),
         prefixed_lines(4), reference=(2, 2),
         env=lambda c: {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE":
                        "[rank${rank}]: "}),
    # --- launch_test.py (torch.distributed.launch) ---------------------
    Case("launch_without_env",
         "launch_test.py::test_launch_without_env",
         lambda c: ["--nnodes=1", "--nproc-per-node=4",
                    "--monitor-interval=1", "--start-method=spawn",
                    "--master-addr=localhost", "--master-port=%d" % c.port,
                    "--node-rank=0", c.script("local_rank.py")],
         succeeds, launcher="ddprun-launch", reference=ANY),
    Case("launch_with_env",
         "launch_test.py::test_launch_with_env",
         lambda c: ["--nnodes=1", "--nproc-per-node=4",
                    "--monitor-interval=1", "--start-method=spawn",
                    "--master-addr=localhost", "--master-port=%d" % c.port,
                    "--node-rank=0", "--use-env"] + touch_py(c),
         touched(4), launcher="ddprun-launch", reference=ANY),
    # --- api_test.py: elastic_launch(config, entrypoint)(args), as the
    # command line that runs the same thing (etcd -> c10d) ---------------
    Case("api_script_python",
         "api_test.py::test_launch_script_python (etcd->c10d)",
         lambda c: api_flags(c, "1") + PYTHON_U + touch_py(c), touched(4),
         reference=ANY),
    Case("api_script_bash",
         "api_test.py::test_launch_script_bash (etcd->c10d)",
         lambda c: api_flags(c, "1") + touch_sh(c), touched(4),
         reference=ANY),
    # The rank-0 node of a static rendezvous at the endpoint; the workers
    # sum their ranks with gloo (_dist_sum).
    Case("api_dist_sum_static",
         "api_test.py::test_launch_dist_sum_with_static_rdzv",
         lambda c: ["--nnodes=1", "--nproc-per-node=4",
                    "--rdzv-backend=static",
                    "--rdzv-endpoint=127.0.0.1:%d" % c.port,
                    "--node-rank=0", "--monitor-interval=0.1",
                    "--max-restarts=0", c.script("init_method.py"),
                    "--init-method=env://"],
         succeeds, reference=ANY, needs_torch=True, timeout=300),
    Case("api_elastic",
         "api_test.py::test_launch_elastic (etcd->c10d)",
         lambda c: api_flags(c, "1:2", "--rdzv-conf=last_call_timeout=1") +
         PYTHON_U + touch_py(c), touched(4), reference=ANY),
    Case("api_elastic_worker_raise",
         "api_test.py::test_launch_elastic_worker_raise_exception",
         lambda c: api_flags(c, "1:2", "--rdzv-conf=last_call_timeout=1") +
         PYTHON_U + touch_py(c, "--fail"), worker_failed, reference=ANY),
    Case("api_elastic_multiple_agents",
         "api_test.py::test_launch_elastic_multiple_agents",
         lambda c: [api_flags(c, "1:2", "--rdzv-id=%d" % c.port) +
                    PYTHON_U + touch_py(c)] * 2, touched(8), reference=ANY),
    # --- torch/distributed/run.py (its documented command lines) --------
    Case("runpy_nproc_cpu",
         "run.py: --nproc-per-node=cpu (one per CPU)",
         lambda c: NPROC_BASE + ["--nproc-per-node=cpu"] + touch_sh(c),
         touched(cpu_count())),
    Case("runpy_module",
         "run.py: -m runs the script as a module (python -m)",
         lambda c: ["--nproc-per-node=2", "-m", "touch_rank",
                    "--touch-file-dir=%s" % c.touch], touched(2),
         reference=ANY,
         env=lambda c: {"PYTHONPATH": os.path.join(
             os.path.dirname(os.path.abspath(__file__)), "scripts")}),
    Case("runpy_tee_prefix",
         "run.py: --tee=3 prefixes each worker line with [role rank]:",
         lambda c: ["--nproc-per-node=2", "--tee=3"] + touch_py(c),
         lambda r: (touched(2)(r), check(
             "[default0]:Success, created" in r.out and
             "[default1]:Success, created" in r.out,
             "no [defaultN]: prefixed lines:\n%s" % r.out[-1500:])),
         reference=ANY),
    Case("runpy_local_ranks_filter",
         "run.py: --local-ranks-filter=1 shows rank 1's output only",
         lambda c: ["--nproc-per-node=2", "--tee=3",
                    "--local-ranks-filter=1"] + touch_py(c),
         lambda r: (touched(2)(r), check(
             "[default1]:Success, created" in r.out and
             "[default0]:Success" not in r.out,
             "filter not applied:\n%s" % r.out[-1500:])),
         reference=(2, 2)),
    Case("runpy_max_restarts",
         "run.py: --max-restarts=1: a failing group is restarted once",
         lambda c: ["--nproc-per-node=2", "--standalone",
                    "--max-restarts=1", "--monitor-interval=0.1"] +
         touch_py(c, "--fail"),
         lambda r: (worker_failed(r), check(
             r.out.count("raising exception since --fail") >= 4,
             "expected both ranks to fail in both attempts:\n%s" %
             r.out[-2000:])), reference=ANY),
    # torchrun ignores a --rdzv-conf key it does not know; ddprun does not
    # (README: "--rdzv_conf is strict").
    Case("runpy_rdzv_conf_unknown_key",
         "run.py: --rdzv-conf keys are read by the backend",
         lambda c: ["--nproc-per-node=2", "--standalone",
                    "--rdzv-conf=no_such_key=1"] + touch_py(c), touched(2),
         reference=ANY,
         known=("--rdzv_conf is strict: an unknown key is exit 2",
                "unknown key 'no_such_key'")),
    # run.py's get_rdzv_endpoint(): static without an endpoint is
    # MASTER_ADDR:--master-port, whose default is 29500; ddprun picks a
    # free port on one node (README).
    Case("runpy_static_default_master_port",
         "run.py: static, one node, no --master-port: MASTER_PORT 29500",
         lambda c: ["--nnodes=1", "--nproc-per-node=2"] + touch_py(c),
         lambda r: (touched(2)(r), check(
             re.search(r"MASTER_PORT = 29500$", r.out, re.M),
             "the worker's MASTER_PORT is not torchrun's default 29500: %s" %
             re.findall(r"MASTER_PORT = \d+", r.out))),
         known=("one node without --master_port: a free port, not 29500",
                "is not torchrun's default 29500")),
    # Static multi-node: both nodes on this host, the workers meet at
    # tcp://MASTER_ADDR:<--master-port> (the --dist-url pattern).
    Case("runpy_static_two_nodes_master_port",
         "run.py: static rendezvous, workers get --master-port",
         lambda c: [["--nnodes=2", "--node-rank=%d" % n,
                     "--nproc-per-node=1", "--master-addr=127.0.0.1",
                     "--master-port=%d" % c.port, "--monitor-interval=0.1",
                     c.script("init_method.py"),
                     "--init-method=tcp://127.0.0.1:%d" % c.port]
                    for n in (0, 1)],
         succeeds, reference=ANY, needs_torch=True,
         timeout=300),
]

NOT_APPLICABLE = [
    ("test_run.py::test_nproc_gpu_launch_configurations",
     "mocks torch.cuda/torch.accelerator to report 3 GPUs (GPU counts); "
     "nproc 'gpu' on a machine with GPUs: tests/agent nproc_resolver"),
    ("test_run.py::test_nproc_xpu_launch_configurations",
     "mocks torch.xpu in the test's own process to report 3 XPUs; ddprun "
     "asks the workers' interpreter, whose torch has none (the count: "
     "agent/ddprun: --nproc_per_node=xpu is counted by the workers' torch)"),
    ("test_run.py::test_launch_elastic_agent_raise_exception",
     "in-process mock of LocalElasticAgent.run raising"),
    ("test_run.py::test_launch_shutdown",
     "in-process mocks of the agent and the rendezvous handler"),
    ("test_run.py::test_is_not_torchelastic_launched",
     "runs the script without any launcher (runpy)"),
    ("test_run.py::test_virtual_local_rank",
     "needs 2 GPUs (compiled device code per rank)"),
    ("api_test.py::test_launch_script_python_local_rank_transfer",
     "same command line as test_launch_script_python (api_script_python)"),
    ("api_test.py::test_launch_function",
     "a Python function as the entrypoint (elastic_launch API)"),
    ("api_test.py::test_launch_elastic_agent_raise_exception",
     "in-process mock of LocalElasticAgent.run"),
    ("api_test.py::test_launch_shutdown",
     "in-process mocks of the agent and the rendezvous handler"),
    ("api_test.py::test_get_entrypoint_name",
     "a Python helper (_get_entrypoint_name), no command line"),
    ("api_test.py::test_rdzv_handler_shutdown_on_agent_signal",
     "in-process mocks; signals: tests/compat signal_forward"),
    ("api_test.py::test_rdzv_handler_shutdown_on_agent_error",
     "in-process mocks of the agent and the rendezvous handler"),
    ("test_run_supervisor.py (9 cases)",
     "the zmq 'supervisor' rendezvous backend of some torch revisions "
     "(torch skips the file without zmq); ddprun has no such backend "
     "(--rdzv_backend=supervisor is exit 2)"),
]

if __name__ == "__main__":
    sys.exit(main("torch", CASES, NOT_APPLICABLE))
