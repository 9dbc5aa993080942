"""Helpers of the live view's real-part tests (live_view_browser_test.py,
live_view_prometheus_test.py): a 2-node job of two ddprun agents on
loopback with Python torch workers, the rendezvous's live view, waits with
deadlines, processes that always go at the end. Test code only."""

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
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
import ddprun_skip  # noqa: E402  (tests/ddprun_skip.py)

PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
WORKER = os.path.join(HERE, "data", "live_view_worker.py")


def free_loopback_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read
    it back): tests/support's FreeLoopbackPort, for servers that cannot
    bind port 0 themselves (Prometheus)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, fn, timeout, poll=0.1):
    """Returns fn()'s first truthy value; raises AssertionError naming
    `what` when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported at the deadline
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.0f s waiting for %s%s" % (
                timeout, what, "" if last_error is None else
                " (last error: %r)" % (last_error,)))
        time.sleep(poll)


def http_get(url, token=None, timeout=2.0):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def torch_available():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


class Processes:
    """Children started with their output in files; every one killed (its
    process group) at the end, whatever happened. As a context manager it
    prints their output when the block fails."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.dump()
        self.close()
        return False

    def __init__(self, keep=False):
        self.dir = tempfile.mkdtemp(prefix="ddprun_live_")
        self.keep = keep or os.environ.get("DDPRUN_KEEP_TEST_DIRS") == "1"
        self.procs = []

    def start(self, name, argv, env=None):
        out = open(os.path.join(self.dir, name + ".log"), "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                             env=full_env, start_new_session=True)
        p.log_path = out.name
        p.name = name
        self.procs.append(p)
        return p

    def log(self, p):
        with open(p.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_log(self, p, pattern, timeout):
        """The first match of `pattern` in p's output (a re.Match)."""
        def find():
            m = re.search(pattern, self.log(p))
            if m is None and p.poll() is not None:
                raise AssertionError("%s exited (%s) before printing %r:\n%s"
                                     % (p.name, p.returncode, pattern,
                                        self.log(p)[-3000:]))
            return m
        return wait_until("%r in %s's output" % (pattern, p.name), find,
                          timeout)

    def dump(self):
        for p in self.procs:
            print("---- %s (exit %s) ----\n%s" % (
                p.name, p.poll(), self.log(p)[-4000:]))

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        if self.keep:
            print("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def agent_argv(bin_dir, rdzv_port, job, extra=(), nproc=2, script=WORKER,
               script_args=()):
    return [os.path.join(bin_dir, "ddprun"), "--nnodes=2",
            "--nproc_per_node=%d" % nproc, "--rdzv_backend=grpc",
            "--rdzv_endpoint=127.0.0.1:%d" % rdzv_port, "--rdzv_id=" + job,
            "--max_restarts=3", *extra, script, *script_args]


def agent_env():
    return {"PYTHON_EXEC": PYTHON, "OMP_NUM_THREADS": "1"}


def job_json(view_url, job, token=None):
    return json.loads(http_get(view_url + "api/v1/jobs/" +
                               urllib.request.quote(job, safe=""), token))


def running_ranks(view_url, job, n, token=None):
    """The job's ranks once `n` of them run with a known step rate."""
    j = job_json(view_url, job, token)
    ranks = [r for r in j["ranks"]
             if r["state"] == "running" and r["steps_per_s"] is not None]
    return j if len(ranks) >= n else None


__all__ = ["ddprun_skip", "free_loopback_port", "wait_until", "http_get",
           "torch_available", "Processes", "agent_argv", "agent_env",
           "job_json", "running_ranks", "PYTHON", "WORKER", "urllib"]
