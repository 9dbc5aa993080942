#!/usr/bin/env python3
"""The live view in a real browser (Debian's chromium, headless, driven by
selenium through chromedriver): a ddprun-rendezvous with --http_port and a
2-node, 4-rank job of two ddprun agents on loopback whose workers are
Python torch scripts (Gloo).

  - the page shows the 4 ranks, and their steps rise without a reload;
  - kill -9 of one rank: the failure (round ended: worker failure) and the
    restart (the next round formed) are on the page within 2 s, without a
    reload (a second try on another rank when a busy machine slowed the
    first);
  - a job whose id is `<script>alert(1)</script>` shows that id as text: no
    alert, no script element added;
  - a screenshot of the page (artifact: --screenshot PATH).

  live_view_browser_test.py --bin-dir build/bin [--screenshot out.png]

Exit 77 (skipped) when chromium, chromedriver, selenium or torch is
missing (a failure under CI=true).
"""
import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

from live_view_support import (Processes, agent_argv, agent_env, ddprun_skip,
                               job_json, running_ranks, torch_available,
                               wait_until)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE = "<script>alert(1)</script>"


def make_driver(profile_dir):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # As root, offline: no sandbox, no GPU, nothing that looks anything up.
    for flag in ("--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-quic", "--no-first-run",
                 "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1500",
                 "--user-data-dir=" + profile_dir):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(10)
    return driver


def page_ranks(driver):
    """{rank: (state, steps, pid)} as the page shows them now."""
    rows = driver.execute_script("""
      return [...document.querySelectorAll('#ranks tbody tr')].map(tr => [
        Number(tr.dataset.rank), tr.dataset.state,
        tr.querySelector('td.steps').textContent,
        tr.querySelector('td.pid').textContent]);""")
    return {r: (state, int(steps) if steps.isdigit() else -1,
                int(pid) if pid.isdigit() else 0)
            for r, state, steps, pid in rows}


def timeline(driver):
    """[(kind, round, cause)] newest first, as the page shows them."""
    return [tuple(x) for x in driver.execute_script("""
      return [...document.querySelectorAll('#timeline li')].map(li => [
        li.dataset.kind, Number(li.dataset.round), li.dataset.cause || '']);""")]


def kill_and_watch(driver, view, rank, failed_round):
    """kill -9 of `rank`'s worker (its pid from the page); returns the
    seconds until the page showed the failure of `failed_round` and the
    next round formed."""
    victim = page_ranks(driver)[rank][2]
    assert victim > 0, page_ranks(driver)
    killed_at = time.monotonic()
    killed_wall = time.time()
    os.kill(victim, signal.SIGKILL)
    wait_until("the worker failure on the page", lambda: any(
        k == "round_ended" and rnd == failed_round and c == "worker_failure"
        for k, rnd, c in timeline(driver)), 10, poll=0.05)
    failure_s = time.monotonic() - killed_at
    wait_until("the restart (round %d formed) on the page" % (
        failed_round + 1), lambda: any(
            k == "round_complete" and rnd == failed_round + 1
            for k, rnd, c in timeline(driver)), 10, poll=0.05)
    restart_s = time.monotonic() - killed_at
    print("kill -9 of rank %d (pid %d): failure on the page after %.2f s, "
          "restart after %.2f s" % (rank, victim, failure_s, restart_s))
    # Where the time went: when the server recorded each event.
    for e in job_json(view, "live")["events"]:
        if e["time"] >= killed_wall - 1:
            print("  server: %s round %d at +%.2f s" % (
                e["kind"], e["round"], e["time"] - killed_wall))
    return failure_s, restart_s


def no_alert(driver):
    from selenium.common.exceptions import NoAlertPresentException
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return True
    raise AssertionError("the page opened an alert: %r" % text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--screenshot", default="")
    args = ap.parse_args()
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER,
                                                 "chromium-driver")):
        if not os.path.exists(path):
            return ddprun_skip.skip_unless_ci(what + " is not installed")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return ddprun_skip.skip_unless_ci("python3-selenium is not installed")
    if not torch_available():
        return ddprun_skip.skip_unless_ci("no torch in " +
                                          os.environ.get("PYTHON_EXEC",
                                                         "/usr/bin/python3"))

    driver = None
    profile = tempfile.mkdtemp(prefix="ddprun_chromium_")
    with Processes() as procs:
        try:
            server = procs.start("rendezvous", [
                os.path.join(args.bin_dir, "ddprun-rendezvous"), "--host",
                "127.0.0.1", "--port", "0", "--http_port", "0",
                "--http_admin_token", "admin-secret"])
            rdzv_port = int(procs.wait_log(
                server, r"rendezvous server listening on 127\.0\.0\.1:(\d+)",
                20).group(1))
            view_port = int(procs.wait_log(
                server, r"live view at http://127\.0\.0\.1:(\d+)/", 20).group(1))
            view = "http://127.0.0.1:%d/" % view_port
            env = agent_env()
            env["LIVE_VIEW_TOTAL_STEPS"] = "6000"  # an ETA of minutes
            for name in ("node0", "node1"):
                procs.start(name, agent_argv(args.bin_dir, rdzv_port, "live"),
                            env)

            driver = make_driver(os.path.join(profile, "profile"))
            driver.get(view)
            # Four ranks run, their steps rise: the page updates itself.
            wait_until("4 running ranks on the page", lambda: len(
                [r for r in page_ranks(driver).values() if r[0] == "running"
                 and r[1] > 0]) == 4, 120)
            before = page_ranks(driver)
            wait_until("every rank's steps to rise on the page", lambda: all(
                page_ranks(driver)[r][1] > before[r][1] for r in before), 20)
            wait_until("the steps/s of 4 ranks in the API",
                       lambda: running_ranks(view, "live", 4), 30)
            assert sorted(page_ranks(driver)) == [0, 1, 2, 3], page_ranks(driver)

            # kill -9 of a rank (its pid from the page): the failure and the
            # restart show up without a reload, within 2 s. A second try (on
            # another rank, the next round) when a busy machine made the
            # first one slower; both are printed.
            marker = driver.execute_script(
                "document.body.dataset.loaded = 'yes'; return 1;")
            assert marker == 1
            timings = []
            for attempt, rank in enumerate((3, 1)):
                failed_round = attempt + 1
                failure_s, restart_s = kill_and_watch(driver, view, rank,
                                                      failed_round)
                timings.append((failure_s, restart_s))
                assert driver.execute_script(
                    "return document.body.dataset.loaded") == "yes", \
                    "page reloaded"
                restarts = driver.execute_script(
                    "return document.querySelector("
                    "'[data-field=restarts] .value').textContent")
                assert restarts.startswith("%d / 3" % failed_round), restarts
                # The new workers run and count again.
                wait_until("4 running ranks after the restart", lambda: len(
                    [r for r, v in page_ranks(driver).items()
                     if v[0] == "running" and v[1] > 0]) == 4, 120)
                if failure_s <= 2.0 and restart_s <= 2.0:
                    break
            best = min(timings, key=lambda t: max(t))
            assert best[0] <= 2.0 and best[1] <= 2.0, \
                "failure and restart shown after %s s" % timings

            # A hostile job id is shown as text. (--log_dir /dev/null: the id
            # holds a '/', which no run directory name can.)
            procs.start("hostile", [
                os.path.join(args.bin_dir, "ddprun"), "--nnodes=1",
                "--rdzv_backend=grpc", "--rdzv_endpoint=127.0.0.1:%d" % rdzv_port,
                "--rdzv_id=" + HOSTILE, "--log_dir", "/dev/null", "--no_python",
                "/bin/sleep", "600"])
            wait_until("the hostile job in the API",
                       lambda: job_json(view, HOSTILE)["state"] == "running", 30)
            # The nav is redrawn with every update: find and click in one go.
            wait_until("a click on the hostile job's button", lambda: driver
                       .execute_script("""
                  const b = [...document.querySelectorAll('#jobs button')]
                      .find(b => b.dataset.job === arguments[0]);
                  if (b) b.click();
                  return !!b;""", HOSTILE), 10)
            shown = wait_until("the hostile job's summary", lambda: driver
                               .execute_script(
                                   "const e = document.querySelector("
                                   "'[data-field=id] .value');"
                                   "return e && e.textContent;") == HOSTILE, 10)
            assert shown
            time.sleep(1.5)  # a few updates with the id on the page
            no_alert(driver)
            scripts = driver.execute_script(
                "return document.querySelectorAll('script').length")
            assert scripts == 2, "%d script elements" % scripts
            assert HOSTILE in driver.find_element("css selector",
                                                  "#jobs").text

            # The screenshot: the training job, selected again.
            driver.execute_script("location.hash = 'job=live'")
            wait_until("the live job selected", lambda: driver.execute_script(
                "const e = document.querySelector('[data-field=id] .value');"
                "return e && e.textContent;") == "live", 10)
            time.sleep(6)  # let the charts gather some history
            if args.screenshot:
                os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)),
                            exist_ok=True)
                driver.save_screenshot(args.screenshot)
                print("screenshot: " + args.screenshot)
            print("PASS")
            return 0
        finally:
            if driver is not None:
                driver.quit()
            shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
