#!/usr/bin/env python3
"""/metrics of a running job, read by Debian's Prometheus tools: a 2-node,
4-rank job of two ddprun agents on loopback (Python torch workers), the
rendezvous hosted by the first agent with its live view (`ddprun
--http_port 0 --http_token T`):

  - `promtool check metrics` accepts /metrics (format and lint);
  - a real Prometheus server (on a free loopback port: it cannot bind port
    0) scrapes it with the bearer token, and its query API returns the step
    rate of every rank.

  live_view_prometheus_test.py --bin-dir build/bin

Exit 77 (skipped) when promtool, prometheus or torch is missing (a
failure under CI=true).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import urllib.parse

from live_view_support import (Processes, agent_argv, agent_env, ddprun_skip,
                               free_loopback_port, http_get, running_ranks,
                               torch_available, wait_until)

TOKEN = "scrape-token-1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    args = ap.parse_args()
    promtool = shutil.which("promtool")
    prometheus = shutil.which("prometheus")
    if not promtool or not prometheus:
        return ddprun_skip.skip_unless_ci(
            "promtool/prometheus are not installed (Debian's prometheus)")
    if not torch_available():
        return ddprun_skip.skip_unless_ci("no torch in the workers' python")

    with Processes() as procs:
        rdzv_port = free_loopback_port()
        extra = ["--http_port", "0", "--http_token", TOKEN]
        # The first agent hosts the rendezvous and its live view; the second
        # finds the port taken and joins (it would take over both).
        host = procs.start("node0", agent_argv(args.bin_dir, rdzv_port,
                                               "prom", extra), agent_env())
        view_port = int(procs.wait_log(
            host, r"live view of the rendezvous at http://127\.0\.0\.1:(\d+)/",
            30).group(1))
        procs.start("node1", agent_argv(args.bin_dir, rdzv_port, "prom",
                                        extra), agent_env())
        view = "http://127.0.0.1:%d/" % view_port
        wait_until("4 ranks with a step rate", lambda: running_ranks(
            view, "prom", 4, TOKEN), 120)

        # promtool: the exposition format and its lint rules.
        text = http_get(view + "metrics", TOKEN)
        check = subprocess.run([promtool, "check", "metrics"], input=text,
                               capture_output=True, text=True, timeout=60)
        print("promtool check metrics: exit %d %s%s" % (
            check.returncode, check.stdout, check.stderr))
        assert check.returncode == 0, text[:3000]
        for family in ("ddprun_rank_steps_per_second",
                       "ddprun_rank_heartbeat_age_seconds",
                       "ddprun_job_round_ends_total", "ddprun_job_round",
                       "ddprun_job_nodes", "ddprun_job_stragglers",
                       "ddprun_rendezvous_rpcs_total",
                       "ddprun_rendezvous_rpc_duration_seconds_bucket"):
            assert family in text, family

        # A real Prometheus scraping it, with the token.
        prom_port = free_loopback_port()
        config = os.path.join(procs.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ddprun
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials: %s
    static_configs:
      - targets: ['127.0.0.1:%d']
""" % (TOKEN, view_port))
        prom = procs.start("prometheus", [
            prometheus, "--config.file=" + config,
            "--storage.tsdb.path=" + os.path.join(procs.dir, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % prom_port,
            "--log.level=warn"])
        api = "http://127.0.0.1:%d/" % prom_port
        wait_until("Prometheus ready", lambda: "Ready" in http_get(
            api + "-/ready"), 60, poll=0.5)

        def rates():
            q = urllib.parse.quote('ddprun_rank_steps_per_second{rdzv_id="prom"}')
            body = json.loads(http_get(api + "api/v1/query?query=" + q))
            series = body["data"]["result"]
            ranks = {s["metric"]["rank"]: float(s["value"][1]) for s in series}
            return ranks if sorted(ranks) == ["0", "1", "2", "3"] and all(
                v > 0 for v in ranks.values()) else None
        ranks = wait_until("the step rate of every rank in Prometheus",
                           rates, 60, poll=0.5)
        print("Prometheus: ddprun_rank_steps_per_second %s" % ranks)
        up = json.loads(http_get(api + "api/v1/query?query=up"))
        assert up["data"]["result"][0]["value"][1] == "1", up
        assert prom.poll() is None, procs.log(prom)
        print("PASS")
        return 0


if __name__ == "__main__":
    sys.exit(main())
