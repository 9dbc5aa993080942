// WorkerGroup: one round's workers as processes, driven by hand: a manual
// event loop on a FakeClock and a fake launcher whose workers exit when the
// test says (or on a signal they die of). Nothing sleeps.
#include "ddprun_catch.h"

#include <csignal>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/elastic/worker_group.h"
#include "tests/agent/agent_fakes.h"
#include "tests/agent/fake_worker_probe.h"
#include "tests/common/manual_event_loop.h"
#include "tests/support/process.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using ddprun::testing::ManualEventLoop;
using ddprun::testing::TempDir;
using testing::CaptureConsole;
using testing::FakeLauncher;
using testing::FakeWorkerProbe;

// A group of `nproc` workers on node 1 of a round whose local rank 0 is
// rank 4, logging under a temporary folder; every exit is recorded.
struct Harness {
  explicit Harness(int nproc, WorkerWatchdog* watchdog = nullptr)
      : launcher(&loop) {
    options.launch.nproc_per_node = nproc;
    options.launch.no_python = true;
    options.launch.entrypoint = "worker_bin";
    options.launch.shutdown_timeout_s = 30;
    options.run_id = "job1";
    options.run_log_dir = tmp.path();
    options.parent_env = {{"PATH", "/usr/bin"}};
    logs = std::make_unique<WorkerLogs>(&options.launch, options.run_log_dir,
                                        &console);
    group = std::make_unique<WorkerGroup>(
        &options, &loop, &launcher, &console, watchdog,
        [this](int local_rank, ExitStatus status) {
          exits.emplace_back(local_rank, status.exitcode);
        });
    round.group_rank = 1;
    round.rank_offset = 4;
  }

  // Begins a group for `round` and launches it.
  Status Start(bool stacks = false, const std::string& timer = "") {
    group->Reset(round);
    Status s = logs->StartAttempt(round.restart_count);
    if (!s.ok()) return s;
    return group->Start(logs.get(), stacks, timer);
  }

  std::vector<int> signals(size_t index) const {
    return launcher.workers.at(index)->signals;
  }

  TempDir tmp;
  ManualEventLoop loop;
  FakeLauncher launcher;
  CaptureConsole console;
  AgentOptions options;
  rendezvous::RendezvousResult round;
  std::unique_ptr<WorkerLogs> logs;
  std::unique_ptr<WorkerGroup> group;
  std::vector<std::pair<int, int>> exits;  // (local rank, exitcode)
};

}  // namespace

TEST_CASE(
    "WorkerGroup: each local rank runs as its global rank with its files "
    "and CPUs, pids by local rank",
    "[agent][group]") {
  Harness h(2);
  h.options.worker_cpus = {{0, 1}, {2, 3}};
  REQUIRE(h.Start(/*stacks=*/true, "/tmp/timer_pipe").ok());
  REQUIRE(h.launcher.workers.size() == 2);
  for (int lr = 0; lr < 2; ++lr) {
    const auto& w = *h.launcher.workers[lr];
    const std::string dir = h.tmp.path() + "/attempt_0/" + std::to_string(lr);
    CHECK(w.env("RANK") == std::to_string(4 + lr));
    CHECK(w.env("LOCAL_RANK") == std::to_string(lr));
    CHECK(w.env("GROUP_RANK") == "1");
    CHECK(w.env("TORCHELASTIC_ERROR_FILE") == dir + "/error.json");
    CHECK(w.env("DDPRUN_STEP_FILE") == dir + "/steps");
    CHECK(w.env("DDPRUN_STACKS_FILE") == dir + "/stacks.txt");
    CHECK(w.env("TORCHELASTIC_TIMER_FILE") == "/tmp/timer_pipe");
    // No watchdog, no heartbeat file.
    CHECK(w.spec.env.count("DDPRUN_WATCHDOG_FILE") == 0);
    CHECK(w.spec.argv == std::vector<std::string>{"worker_bin"});
  }
  CHECK(h.launcher.workers[1]->spec.cpu_affinity == std::vector<int>{2, 3});
  CHECK(h.group->pids() == std::vector<int>{1000, 1001});
  CHECK(h.group->RunningWorker(1001) == 1);
  CHECK(h.group->RunningWorker(999) == -1);
  h.launcher.Exit(1, 0);
  CHECK(h.exits == std::vector<std::pair<int, int>>{{1, 0}});
  CHECK(h.group->RunningWorker(1001) == -1);  // exited: no longer a worker's
  CHECK(h.group->AnyRunning());
  CHECK(h.group->StackTargets().size() == 1);  // the running one only
  h.launcher.Exit(0, 0);
  CHECK_FALSE(h.group->AnyRunning());
}

TEST_CASE(
    "WorkerGroup: a stop sends SIGTERM and SIGCONT to every running "
    "worker's group, SIGKILL to those left after --shutdown_timeout",
    "[agent][group]") {
  Harness h(3);
  REQUIRE(h.Start().ok());
  h.launcher.workers[2]->dies_on = {SIGKILL};  // ignores SIGTERM
  h.launcher.Exit(1, 0);
  h.group->Stop(SIGTERM);
  CHECK(h.signals(0) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(h.signals(1).empty());  // exited before the stop
  CHECK(h.signals(2) == std::vector<int>{SIGTERM, SIGCONT});
  h.loop.Advance(29s);
  CHECK(h.signals(2) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(h.group->AnyRunning());
  h.loop.Advance(2s);
  CHECK(h.signals(2) == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
  CHECK(h.signals(0) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(h.exits ==
        std::vector<std::pair<int, int>>{{1, 0}, {0, -SIGTERM}, {2, -SIGKILL}});
  CHECK_FALSE(h.group->AnyRunning());
  // What a worker started in its group ends with it, after an exit too.
  h.group->KillLeftovers();
  for (size_t i = 0; i < 3; ++i) CHECK(h.signals(i).back() == SIGKILL);
  CHECK(h.signals(1) == std::vector<int>{SIGKILL});
}

TEST_CASE(
    "WorkerGroup: a stop by another signal sends no SIGCONT, KillRunning "
    "does not wait for the deadline",
    "[agent][group]") {
  Harness h(2);
  h.launcher.default_dies_on = {SIGKILL};
  REQUIRE(h.Start().ok());
  h.group->Stop(SIGINT);
  CHECK(h.signals(0) == std::vector<int>{SIGINT});
  CHECK(h.signals(1) == std::vector<int>{SIGINT});
  CHECK(h.loop.pending_timers() == 1);  // the deadline
  h.group->KillRunning();
  CHECK(h.loop.pending_timers() == 0);
  h.loop.RunUntilIdle();
  CHECK(h.signals(0) == std::vector<int>{SIGINT, SIGKILL});
  CHECK(h.exits.size() == 2);
}

TEST_CASE(
    "WorkerGroup: after Reset the old group's exits and stop deadline reach "
    "nothing",
    "[agent][group]") {
  Harness h(2);
  REQUIRE(h.Start().ok());
  h.launcher.workers[1]->dies_on = {};
  h.group->Stop(SIGTERM);
  h.loop.RunUntilIdle();
  REQUIRE(h.exits.size() == 1);  // local rank 1 still runs
  h.round.restart_count = 1;
  REQUIRE(h.Start().ok());
  CHECK(h.group->starts() == 2);
  CHECK(h.group->pids() == std::vector<int>{1002, 1003});
  h.launcher.Exit(1, 0);  // the old process, late
  CHECK(h.exits.size() == 1);
  h.loop.Advance(31s);
  CHECK(h.signals(2).empty());
  CHECK(h.signals(3).empty());
  CHECK(h.signals(1) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(h.group->AnyRunning());
}

TEST_CASE(
    "WorkerGroup: a relaunched rank runs again alone with its generation, "
    "a signal to the others spares it",
    "[agent][group]") {
  Harness h(3);
  REQUIRE(h.Start().ok());
  h.launcher.Exit(1, 1);
  CHECK(h.group->FailureOf(1).exitcode == 1);
  CHECK(h.group->NotRunningBesides(0)->local_rank == 1);
  CHECK(h.group->NotRunningBesides(1) == nullptr);
  REQUIRE(h.group->Relaunch(1, 2).ok());
  REQUIRE(h.launcher.workers.size() == 4);
  const auto& again = *h.launcher.workers[3];
  CHECK(again.env("RANK") == "5");
  CHECK(again.env("LOCAL_RANK") == "1");
  CHECK(again.env("DDPRUN_GENERATION") == "2");
  CHECK(again.env("DDPRUN_REPLACEMENT") == "1");
  CHECK(h.group->pids() == std::vector<int>{1000, 1003, 1002});
  CHECK(h.group->RunningWorker(1003) == 1);
  // Generation 2's notice goes to the workers that started before it.
  h.group->SignalOlderThan(SIGUSR1, 2);
  CHECK(h.signals(0) == std::vector<int>{SIGUSR1});
  CHECK(h.signals(2) == std::vector<int>{SIGUSR1});
  CHECK(h.signals(3).empty());
  // Generation 3's goes to the replacement too.
  h.group->SignalOlderThan(SIGUSR2, 3);
  CHECK(h.signals(3) == std::vector<int>{SIGUSR2});
  CHECK(h.signals(0) == std::vector<int>{SIGUSR1, SIGUSR2});
  h.launcher.Exit(3, 0);
  CHECK(h.exits.back() == std::pair<int, int>{1, 0});
  CHECK_FALSE(h.group->Relaunch(7, 3).ok());
}

TEST_CASE(
    "WorkerGroup: a killed worker's failure says why, a held failure "
    "counts only once added, the next group starts without them",
    "[agent][group]") {
  Harness h(3);
  REQUIRE(h.Start().ok());
  h.group->worker(0)->watchdog_kill = "killed by the ddprun watchdog: hung";
  h.group->Kill(0);
  h.loop.RunUntilIdle();
  CHECK(h.signals(0) == std::vector<int>{SIGKILL});
  ProcessFailure killed = h.group->FailureOf(0);
  CHECK(killed.exitcode == -SIGKILL);
  CHECK(killed.global_rank == 4);
  CHECK(killed.traceback == "killed by the ddprun watchdog: hung");
  h.group->AddFailure(killed);
  h.launcher.Exit(1, 3);
  h.group->HoldFailure(1, h.group->FailureOf(1));
  CHECK(h.group->failures().size() == 1);
  h.group->AddHeldFailure(2);  // none held for it
  h.group->AddHeldFailure(1);
  h.group->AddHeldFailure(1);  // taken already
  REQUIRE(h.group->failures().size() == 2);
  CHECK(h.group->failures()[1].local_rank == 1);
  CHECK(h.group->failures()[1].exitcode == 3);
  h.launcher.Exit(2, 0);
  REQUIRE(h.Start().ok());
  CHECK(h.group->failures().empty());
}

TEST_CASE(
    "WorkerGroup: the watchdog watches each worker from its launch to its "
    "exit or the stop",
    "[agent][group]") {
  ManualEventLoop watch_loop;
  FakeWorkerProbe probe;
  WorkerWatchdog watchdog(&watch_loop, &probe, 10s,
                          [](const WorkerWatchdog::Stuck&) {});
  Harness h(3, &watchdog);
  REQUIRE(h.Start().ok());
  CHECK(watchdog.watched() == 3);
  CHECK(h.launcher.workers[0]->env("DDPRUN_WATCHDOG_FILE") ==
        h.tmp.path() + "/attempt_0/0/heartbeat");
  h.launcher.Exit(0, 0);
  CHECK(watchdog.watched() == 2);
  h.group->Stop(SIGTERM);
  CHECK(watchdog.watched() == 0);
  h.group->Watch(1);  // watched again (as while a replacement heals)
  CHECK(watchdog.watched() == 1);
}

TEST_CASE(
    "WorkerGroup: a launch that fails leaves the workers launched before it "
    "running, for the stop",
    "[agent][group]") {
  Harness h(3);
  h.launcher.fail_launch_at = 1;
  Status s = h.Start();
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("cannot find executable") != std::string::npos);
  CHECK(h.group->AnyRunning());
  CHECK(h.group->pids() == std::vector<int>{1000, -1, -1});
  h.group->Stop(SIGKILL);
  h.loop.RunUntilIdle();
  CHECK(h.signals(0) == std::vector<int>{SIGKILL});
  CHECK_FALSE(h.group->AnyRunning());
}

}  // namespace ddprun::agent
