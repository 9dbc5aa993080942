// The elastic loop driven by hand: a manual event loop on a FakeClock, a fake
// process launcher and a fake rendezvous. Nothing sleeps.

#include "ddprun_catch.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/elastic/elastic_agent.h"
#include "agent/elastic/health_check.h"
#include "tests/agent/agent_fakes.h"
#include "tests/agent/fake_worker_probe.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using ddprun::testing::ManualEventLoop;
using rendezvous::RendezvousEventType;
using testing::CaptureConsole;
using testing::FakeLauncher;
using testing::FakeRendezvous;
using testing::FakeWorker;
using testing::FakeWorkerProbe;

// One agent with its fakes; `nproc` workers, the given restart budget.
struct Harness {
  explicit Harness(int nproc, int max_restarts = 0)
      : launcher(&loop), rendezvous(&loop) {
    char tmpl[] = "/tmp/ddprun_agent_test_XXXXXX";
    log_dir = mkdtemp(tmpl);
    options.launch.nproc_per_node = nproc;
    options.launch.max_restarts = max_restarts;
    options.launch.no_python = true;
    options.launch.entrypoint = "worker_bin";
    options.launch.shutdown_timeout_s = 30;
    options.run_id = "job1";
    options.run_log_dir = log_dir;
    options.hostname = "host-a";
    options.parent_env = {{"PATH", "/usr/bin"}};
    rendezvous.max_restarts = max_restarts;
  }
  ~Harness() { (void)!system(("rm -rf " + log_dir).c_str()); }

  // --watchdog_timeout=`seconds`, reading workers through `probe`.
  void StartWithWatchdog(double seconds, WorkerProbe* probe) {
    options.launch.watchdog_timeout_s = seconds;
    options.watchdog_probe = probe;
    Start();
  }

  void Start() {
    agent = std::make_unique<ElasticAgent>(options, &loop, &launcher,
                                           &rendezvous, &console);
    agent->Start([this](int code) { exit_code = code; });
    loop.RunUntilIdle();
  }

  ManualEventLoop loop;
  FakeLauncher launcher;
  FakeRendezvous rendezvous;
  CaptureConsole console;
  AgentOptions options;
  std::string log_dir;
  std::unique_ptr<ElasticAgent> agent;
  std::optional<int> exit_code;
};

}  // namespace

TEST_CASE("ElasticAgent: all workers succeed -> SUCCEEDED, exit 0", "[agent]") {
  Harness h(3);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 3);
  CHECK(h.agent->state() == WorkerState::kHealthy);
  for (int i = 0; i < 3; ++i) {
    const auto& w = *h.launcher.workers[i];
    CHECK(w.env("RANK") == std::to_string(i));
    CHECK(w.env("LOCAL_RANK") == std::to_string(i));
    CHECK(w.env("WORLD_SIZE") == "3");
    CHECK(w.env("TORCHELASTIC_RUN_ID") == "job1");
    CHECK(w.env("TORCHELASTIC_ERROR_FILE") ==
          h.log_dir + "/attempt_0/" + std::to_string(i) + "/error.json");
    CHECK(w.spec.argv == std::vector<std::string>{"worker_bin"});
  }
  CHECK(h.rendezvous.last_request.local_world_size == 3);
  h.launcher.Exit(0, 0, "hello\n");
  h.launcher.Exit(2, 0);
  h.loop.RunUntilIdle();
  CHECK_FALSE(h.exit_code.has_value());
  h.launcher.Exit(1, 0);
  h.loop.RunUntilIdle();
  REQUIRE(h.exit_code == 0);
  CHECK(h.agent->state() == WorkerState::kSucceeded);
  CHECK(h.rendezvous.successes == 1);
  CHECK(h.console.out == "[default0]:hello\n");
}

TEST_CASE("ElasticAgent: a failure restarts the group while budget lasts",
          "[agent]") {
  Harness h(2, /*max_restarts=*/1);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  h.launcher.Exit(1, 3);
  h.loop.RunUntilIdle();
  // Worker 0 was stopped with SIGTERM, then the group was started again.
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.agent->state() == WorkerState::kHealthy);
  CHECK(h.agent->restart_count() == 1);
  for (const auto& w : h.launcher.Latest(2)) {
    CHECK(w->env("TORCHELASTIC_RESTART_COUNT") == "1");
    CHECK(w->env("TORCHELASTIC_ERROR_FILE").find("/attempt_1/") !=
          std::string::npos);
  }
  CHECK(h.rendezvous.joins == 2);
  h.launcher.Exit(2, 0);
  h.launcher.Exit(3, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(h.console.err.find("FAILED") == std::string::npos);
}

TEST_CASE("ElasticAgent: exit code 2 on the first attempt is not retried",
          "[agent]") {
  Harness h(2, /*max_restarts=*/3);
  h.Start();
  h.launcher.Exit(1, 2);
  h.loop.RunUntilIdle();
  REQUIRE(h.exit_code == 1);
  CHECK(h.launcher.workers.size() == 2);  // no second attempt
  CHECK(h.rendezvous.no_retry_reports == 1);
  CHECK(h.rendezvous.restarts_used == 0);
  CHECK(h.console.err.find("Root Cause") != std::string::npos);
}

TEST_CASE(
    "ElasticAgent: exit code 2 is retried later, or with "
    "--retry_usage_errors",
    "[agent]") {
  {
    Harness h(1, /*max_restarts=*/2);
    h.Start();
    h.launcher.Exit(0, 1);  // attempt 0: an ordinary failure
    h.loop.RunUntilIdle();
    REQUIRE(h.launcher.workers.size() == 2);
    h.launcher.Exit(1, 2);  // attempt 1: exit 2 is retried like any failure
    h.loop.RunUntilIdle();
    CHECK(h.launcher.workers.size() == 3);
    CHECK(h.rendezvous.no_retry_reports == 0);
  }
  {
    Harness h(1, /*max_restarts=*/1);
    h.options.launch.retry_usage_errors = true;
    h.Start();
    h.launcher.Exit(0, 2);
    h.loop.RunUntilIdle();
    CHECK(h.launcher.workers.size() == 2);
    CHECK(h.rendezvous.no_retry_reports == 0);
  }
}

TEST_CASE("ElasticAgent: budget exhausted -> FAILED, table, exit 1",
          "[agent]") {
  Harness h(2, /*max_restarts=*/0);
  h.Start();
  h.launcher.Exit(1, 3);
  h.loop.RunUntilIdle();
  REQUIRE(h.exit_code == 1);
  CHECK(h.agent->state() == WorkerState::kFailed);
  CHECK(h.launcher.workers.size() == 2);  // no restart
  CHECK(h.console.err.find("worker_bin FAILED") != std::string::npos);
  CHECK(h.console.err.find("  rank      : 1 (local_rank: 1)") !=
        std::string::npos);
  CHECK(h.console.err.find("  exitcode  : 3 (pid: 1001)") != std::string::npos);
  CHECK(h.console.err.find("<NO_OTHER_FAILURES>") != std::string::npos);
  // The worker stopped by the agent is not reported as a failure.
  CHECK(h.console.err.find("local_rank: 0") == std::string::npos);
  REQUIRE(h.agent->last_failures().size() == 1);
}

TEST_CASE("ElasticAgent: failures in one batch are all reported", "[agent]") {
  Harness h(3);
  h.Start();
  // Two exits delivered before the loop runs the posted stop.
  h.launcher.Exit(0, 1);
  h.launcher.Exit(2, -11);
  h.loop.RunUntilIdle();
  REQUIRE(h.exit_code == 1);
  CHECK(h.agent->last_failures().size() == 2);
  CHECK(h.console.err.find("Signal 11 (SIGSEGV) received by PID 1002") !=
        std::string::npos);
}

TEST_CASE("ElasticAgent: membership change restarts without budget",
          "[agent]") {
  Harness h(2, /*max_restarts=*/0);
  h.Start();
  REQUIRE(h.rendezvous.handler);
  h.rendezvous.handler(
      {RendezvousEventType::kMembershipChanged, "node b waiting"});
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.rendezvous.failure_reasons.empty());
  CHECK(h.agent->restart_count() == 0);
  for (const auto& w : h.launcher.Latest(2)) {
    CHECK(w->env("TORCHELASTIC_RESTART_COUNT") == "0");
  }
  h.launcher.Exit(2, 0);
  h.launcher.Exit(3, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
}

TEST_CASE("ElasticAgent: restart requested and job failed events", "[agent]") {
  Harness h(1);
  h.Start();
  h.rendezvous.handler({RendezvousEventType::kRestartRequested, "node b"});
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 2);
  CHECK(h.rendezvous.joins == 2);
  h.rendezvous.handler({RendezvousEventType::kJobFailed, "node b gave up"});
  h.loop.RunUntilIdle();
  CHECK(h.launcher.workers[1]->signals.front() == SIGTERM);
  CHECK(h.exit_code == 1);
  CHECK(h.agent->state() == WorkerState::kFailed);
}

TEST_CASE("ElasticAgent: SIGKILL once the shutdown timeout passes", "[agent]") {
  Harness h(2, /*max_restarts=*/1);
  h.options.launch.shutdown_timeout_s = 30;
  h.launcher.default_dies_on = {SIGKILL};  // workers ignore SIGTERM
  h.Start();
  h.launcher.Exit(0, 1);
  h.loop.RunUntilIdle();
  auto& survivor = *h.launcher.workers[1];
  // SIGCONT after SIGTERM: a stopped worker must see the SIGTERM now.
  CHECK(survivor.signals == std::vector<int>{SIGTERM, SIGCONT});
  h.loop.Advance(29s);
  CHECK(survivor.signals == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(h.launcher.workers.size() == 2);
  h.loop.Advance(2s);
  REQUIRE(survivor.signals.size() >= 3);
  CHECK(survivor.signals[2] == SIGKILL);
  // Once it is gone the group restarts; its only timer reads the step
  // counts once a second (the straggler check).
  CHECK(h.launcher.workers.size() == 4);
  CHECK(h.loop.pending_timers() == 1);
}

TEST_CASE("ElasticAgent: a handled signal is forwarded, exit 128+N",
          "[agent]") {
  Harness h(2);
  h.Start();
  h.agent->OnSignal(SIGINT);
  h.loop.RunUntilIdle();
  CHECK(h.launcher.workers[0]->signals.front() == SIGINT);
  CHECK(h.launcher.workers[1]->signals.front() == SIGINT);
  CHECK(h.exit_code == 128 + SIGINT);
  CHECK(h.rendezvous.leaves == 1);
  CHECK(h.console.err.find("FAILED") == std::string::npos);
}

TEST_CASE("ElasticAgent: second signal kills without waiting", "[agent]") {
  Harness h(1);
  h.launcher.default_dies_on = {SIGKILL};
  h.Start();
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK_FALSE(h.exit_code.has_value());
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGTERM);
}

TEST_CASE("ElasticAgent: launch error stops started workers, exit 1",
          "[agent]") {
  Harness h(3);
  h.launcher.fail_launch_at = 2;
  h.Start();
  CHECK(h.launcher.workers[0]->signals.front() == SIGKILL);
  CHECK(h.exit_code == 1);
}

TEST_CASE("ElasticAgent: rendezvous failure ends the job", "[agent]") {
  Harness h(2);
  h.rendezvous.fail_join = true;
  h.Start();
  CHECK(h.launcher.workers.empty());
  CHECK(h.exit_code == 1);
}

TEST_CASE("ElasticAgent: a spare whose job succeeded ends with 0, no workers",
          "[agent]") {
  Harness h(2);
  h.rendezvous.job_succeeded = true;
  h.Start();
  CHECK(h.launcher.workers.empty());
  CHECK(h.exit_code == 0);
  CHECK(h.agent->state() == WorkerState::kSucceeded);
  CHECK(h.rendezvous.successes == 0);  // no round of its own to report
}

TEST_CASE("ElasticAgent: static mode needs group rank == --node_rank",
          "[agent]") {
  Harness h(2);
  h.options.node_rank_exact = true;
  h.options.launch.node_rank = 1;
  h.options.node_rank_hint = 1;
  SECTION("another node holds the rank: leave, exit 1, no workers") {
    h.rendezvous.group_rank = 2;
    h.Start();
    CHECK(h.rendezvous.last_request.node_rank_hint == 1);
    CHECK(h.launcher.workers.empty());
    CHECK(h.rendezvous.leaves == 1);
    CHECK(h.exit_code == 1);
  }
  SECTION("the rank is granted: workers start") {
    h.rendezvous.group_rank = 1;
    h.Start();
    CHECK(h.launcher.workers.size() == 2);
    CHECK(!h.exit_code.has_value());
  }
}

TEST_CASE("ElasticAgent: local_ranks_filter and tee prefixes", "[agent]") {
  Harness h(2);
  h.options.launch.local_ranks_filter = std::set<int>{1};
  h.options.launch.tee.all = StdStreams::kOut;
  h.options.launch.role = "trainer";
  h.Start();
  h.launcher.Exit(0, 0, "zero\n");
  h.launcher.Exit(1, 0, "one\npartial");
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(h.console.out == "[trainer1]:one\n[trainer1]:partial\n");
}

TEST_CASE("ElasticAgent: per-rank redirect map writes the attempt layout",
          "[agent]") {
  Harness h(2);
  h.options.launch.redirects.is_map = true;
  h.options.launch.redirects.per_rank = {{0, StdStreams::kOut}};
  h.Start();
  h.launcher.Exit(0, 0, "to file\n");
  h.launcher.Exit(1, 0, "to console\n");
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(h.console.out == "[default1]:to console\n");
  std::ifstream in(h.log_dir + "/attempt_0/0/stdout.log");
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line == "to file");
  // Rank 1 is not redirected: no file, as torchrun.
  CHECK_FALSE(std::ifstream(h.log_dir + "/attempt_0/1/stdout.log").good());
}

TEST_CASE("ElasticAgent: no watchdog file without --watchdog_timeout",
          "[agent][watchdog]") {
  Harness h(1);
  h.Start();
  CHECK(h.launcher.workers[0]->spec.env.count("DDPRUN_WATCHDOG_FILE") == 0);
  CHECK(h.loop.pending_timers() == 1);  // the straggler check's, no other
}

TEST_CASE("ElasticAgent: the watchdog kills a stopped worker, group restarts",
          "[agent][watchdog]") {
  Harness h(2, /*max_restarts=*/1);
  FakeWorkerProbe probe;
  h.StartWithWatchdog(2, &probe);
  REQUIRE(h.launcher.workers.size() == 2);
  for (int lr = 0; lr < 2; ++lr) {
    CHECK(h.launcher.workers[lr]->env("DDPRUN_WATCHDOG_FILE") ==
          h.log_dir + "/attempt_0/" + std::to_string(lr) + "/heartbeat");
  }
  h.loop.Advance(1s);
  probe.stopped.insert(h.launcher.workers[1]->pid);
  for (int i = 0; i < 20; ++i) h.loop.Advance(100ms);
  CHECK(h.launcher.workers.size() == 2);  // 2 s: not yet
  for (int i = 0; i < 5; ++i) h.loop.Advance(100ms);
  // SIGKILL to the stopped worker's group (it would ignore SIGTERM), then
  // the usual stop of the others and a restart.
  REQUIRE_FALSE(h.launcher.workers[1]->signals.empty());
  CHECK(h.launcher.workers[1]->signals.front() == SIGKILL);
  CHECK(h.launcher.workers[0]->signals.front() == SIGTERM);
  REQUIRE(h.launcher.workers.size() == 4);
  CHECK(h.agent->restart_count() == 1);
  REQUIRE(h.rendezvous.failure_reasons.size() == 1);
  CHECK(h.rendezvous.failure_reasons[0].find(
            "killed by the ddprun watchdog: stopped (state T)") !=
        std::string::npos);
  // The new group is watched with fresh files.
  CHECK(h.launcher.workers[3]->env("DDPRUN_WATCHDOG_FILE") ==
        h.log_dir + "/attempt_1/1/heartbeat");
  CHECK(h.loop.pending_timers() == 2);  // the watchdog's, the step counts'
}

TEST_CASE("ElasticAgent: a silent heartbeat with no budget fails the job",
          "[agent][watchdog]") {
  Harness h(1, /*max_restarts=*/0);
  FakeWorkerProbe probe;
  h.StartWithWatchdog(1.5, &probe);
  const std::string file = h.launcher.workers[0]->env("DDPRUN_WATCHDOG_FILE");
  for (int i = 0; i < 10; ++i) {
    probe.Touch(file);
    h.loop.Advance(500ms);
  }
  CHECK_FALSE(h.exit_code.has_value());
  for (int i = 0; i < 20; ++i) h.loop.Advance(100ms);
  REQUIRE(h.exit_code == 1);
  // Killed, never asked to terminate: a hung worker would not act on it.
  CHECK(h.launcher.workers[0]->signals.front() == SIGKILL);
  CHECK(std::count(h.launcher.workers[0]->signals.begin(),
                   h.launcher.workers[0]->signals.end(), SIGTERM) == 0);
  CHECK(h.console.err.find("  exitcode  : -9 (pid: 1000)") !=
        std::string::npos);
  CHECK(h.console.err.find("traceback : killed by the ddprun watchdog: "
                           "without a heartbeat for 1.") != std::string::npos);
  CHECK(h.console.err.find("(--watchdog_timeout=1.5)") != std::string::npos);
  CHECK(h.loop.pending_timers() == 0);
}

// A signal reaches the agent while a rendezvous call is in flight (the
// loop is never blocked by one): the call is cancelled by leaving the job.

TEST_CASE("ElasticAgent: a signal during a Join leaves the job, exit 128+N",
          "[agent][signal]") {
  Harness h(2);
  h.rendezvous.hold_join = true;
  h.Start();
  REQUIRE(h.rendezvous.holding());
  CHECK_FALSE(h.exit_code.has_value());
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGTERM);
  CHECK(h.rendezvous.leaves == 1);
  CHECK(h.rendezvous.joins == 1);
  CHECK(h.launcher.workers.empty());  // the cancelled Join started nothing
}

TEST_CASE("ElasticAgent: a signal in the exit barrier leaves, exit 128+N",
          "[agent][signal]") {
  Harness h(2);
  h.rendezvous.hold_barrier = true;
  h.Start();
  h.launcher.Exit(0, 0);
  h.launcher.Exit(1, 0);
  h.loop.RunUntilIdle();
  REQUIRE(h.rendezvous.successes == 1);
  CHECK_FALSE(h.exit_code.has_value());  // waiting for the other nodes
  h.agent->OnSignal(SIGINT);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGINT);
  CHECK(h.rendezvous.leaves == 1);
}

TEST_CASE("ElasticAgent: the exit barrier's answer ends the job with 0",
          "[agent][signal]") {
  Harness h(1);
  h.rendezvous.hold_barrier = true;
  h.Start();
  h.launcher.Exit(0, 0);
  h.loop.RunUntilIdle();
  CHECK_FALSE(h.exit_code.has_value());
  h.rendezvous.Release();
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(h.rendezvous.leaves == 0);
}

TEST_CASE(
    "ElasticAgent: a signal during a failure report turns the restart into "
    "the exit",
    "[agent][signal]") {
  Harness h(2, /*max_restarts=*/1);
  h.rendezvous.hold_failure = true;
  h.Start();
  h.launcher.Exit(0, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.rendezvous.failure_reasons.size() == 1);
  REQUIRE(h.rendezvous.holding());
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK_FALSE(h.exit_code.has_value());  // the report decides first
  h.rendezvous.Release();                // the job would restart
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGTERM);
  CHECK(h.rendezvous.joins == 1);  // no new round joined
  CHECK(h.rendezvous.leaves == 1);
  CHECK(h.launcher.workers.size() == 2);
}

TEST_CASE(
    "ElasticAgent: a signal during the report of a failed job keeps exit 1",
    "[agent][signal]") {
  Harness h(1, /*max_restarts=*/0);
  h.rendezvous.hold_failure = true;
  h.Start();
  h.launcher.Exit(0, 3);
  h.loop.RunUntilIdle();
  h.agent->OnSignal(SIGTERM);
  h.rendezvous.Release();
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 1);
  CHECK(h.console.err.find("worker_bin FAILED") != std::string::npos);
}

TEST_CASE("ElasticAgent: a signal before the first rendezvous joins nothing",
          "[agent][signal]") {
  Harness h(2);
  h.agent = std::make_unique<ElasticAgent>(h.options, &h.loop, &h.launcher,
                                           &h.rendezvous, &h.console);
  h.agent->Start([&h](int code) { h.exit_code = code; });
  h.agent->OnSignal(SIGHUP);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGHUP);
  CHECK(h.rendezvous.joins == 0);
  CHECK(h.launcher.workers.empty());
}

TEST_CASE("ElasticAgent: workers get a stacks file and ddprun's Python hook",
          "[agent][stacks]") {
  Harness h(2);
  h.options.python_stack_helper_dir = "/opt/ddprun/lib/ddprun/python";
  h.options.parent_env["PYTHONPATH"] = "/user/path";
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  for (int lr = 0; lr < 2; ++lr) {
    const auto& w = *h.launcher.workers[lr];
    CHECK(w.env("DDPRUN_STACKS_FILE") ==
          h.log_dir + "/attempt_0/" + std::to_string(lr) + "/stacks.txt");
    CHECK(w.env("DDPRUN_STACKS_SIGNAL") == std::to_string(SIGRTMAX - 2));
    // The step counter's file (ddprun_steps.step(), worker::Heartbeat()).
    CHECK(w.env("DDPRUN_STEP_FILE") ==
          h.log_dir + "/attempt_0/" + std::to_string(lr) + "/steps");
    // Last: the user's order is kept (deepspeed's cwd stays first).
    CHECK(w.env("PYTHONPATH") == "/user/path:/opt/ddprun/lib/ddprun/python");
  }
}

TEST_CASE("ElasticAgent: a stacks file no dump wrote to goes with its worker",
          "[agent][stacks]") {
  // Issue 43: every run left an empty attempt_0/<rank>/stacks.txt per rank.
  Harness h(2);
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  // What the workers' hooks create at start; rank 1 was dumped once.
  const std::string empty = h.launcher.workers[0]->env("DDPRUN_STACKS_FILE");
  const std::string dumped = h.launcher.workers[1]->env("DDPRUN_STACKS_FILE");
  std::ofstream(empty).close();
  std::ofstream(dumped) << "# ddprun stack dump: rank 1\nThread 0x1:\n";
  h.launcher.Exit(0, 0);
  h.launcher.Exit(1, 0);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 0);
  CHECK(access(empty.c_str(), F_OK) != 0);
  CHECK(access(dumped.c_str(), F_OK) == 0);
}

TEST_CASE("ElasticAgent: DDPRUN_STACKS=0 and a missing hook change nothing",
          "[agent][stacks]") {
  Harness off(1);
  off.options.python_stack_helper_dir = "/opt/ddprun/lib/ddprun/python";
  off.options.parent_env["DDPRUN_STACKS"] = "0";
  off.Start();
  CHECK(off.launcher.workers[0]->spec.env.count("DDPRUN_STACKS_FILE") == 0);
  CHECK(off.launcher.workers[0]->spec.env.count("PYTHONPATH") == 0);
  Harness missing(1);  // python_stack_helper_dir "": no folder to add
  missing.Start();
  CHECK(missing.launcher.workers[0]->spec.env.count("DDPRUN_STACKS_FILE") == 1);
  CHECK(missing.launcher.workers[0]->spec.env.count("PYTHONPATH") == 0);
}

// --health_check: a checker that answers on the loop, as the real one
// does from its thread.
class FakeHealth : public HealthChecker {
 public:
  explicit FakeHealth(EventLoop* loop) : loop_(loop) {}
  void Check(bool restart, std::function<void(Status)> done) override {
    restarts.push_back(restart);
    Status s = answers.empty() ? Status::Ok() : answers.front();
    if (!answers.empty()) answers.erase(answers.begin());
    loop_->Post([done, s] { done(s); });
  }
  std::vector<Status> answers;  // in order; OK once they run out
  std::vector<bool> restarts;

 private:
  EventLoop* loop_;
};

TEST_CASE("ElasticAgent: an unhealthy node does not join, and says why",
          "[agent][health]") {
  Harness h(2);
  FakeHealth health(&h.loop);
  health.answers = {FailedPreconditionError(
      "GPU 1 has 40000 MiB of 81559 MiB in use, more than "
      "--health_check_gpu_mem_mb=1024")};
  h.options.health = &health;
  h.Start();
  REQUIRE(h.exit_code == 1);
  CHECK(h.launcher.workers.empty());
  // The rendezvous was told (its bad-host policy counts the host), and the
  // node left.
  CHECK(h.rendezvous.joins == 1);
  CHECK(h.rendezvous.last_request.unhealthy ==
        "GPU 1 has 40000 MiB of 81559 MiB in use, more than "
        "--health_check_gpu_mem_mb=1024");
  CHECK(h.rendezvous.leaves == 1);
  CHECK(health.restarts == std::vector<bool>{false});
}

TEST_CASE("ElasticAgent: the health check runs before every round",
          "[agent][health]") {
  Harness h(1, /*max_restarts=*/2);
  FakeHealth health(&h.loop);
  health.answers = {Status::Ok(), FailedPreconditionError("no /dev/shm")};
  h.options.health = &health;
  h.Start();
  REQUIRE(h.launcher.workers.size() == 1);
  CHECK(h.rendezvous.last_request.unhealthy.empty());
  h.launcher.Exit(0, 1);
  h.loop.RunUntilIdle();
  // Before the restart: checked again (told it is a restart), failed.
  CHECK(health.restarts == std::vector<bool>{false, true});
  REQUIRE(h.exit_code == 1);
  CHECK(h.launcher.workers.size() == 1);
  CHECK(h.rendezvous.last_request.unhealthy == "no /dev/shm");
}

TEST_CASE("ElasticAgent: a signal during the health check leaves at once",
          "[agent][health]") {
  Harness h(1);
  // A checker that never answers (a slow nvidia-smi).
  struct Silent : HealthChecker {
    void Check(bool, std::function<void(Status)>) override {}
  } silent;
  h.options.health = &silent;
  h.Start();
  CHECK_FALSE(h.exit_code.has_value());
  h.agent->OnSignal(SIGTERM);
  h.loop.RunUntilIdle();
  CHECK(h.exit_code == 128 + SIGTERM);
  CHECK(h.rendezvous.joins == 0);
}

// Writes `count` as the worker's step counter does.
void WriteSteps(const FakeWorker& w, int count) {
  std::ofstream(w.env("DDPRUN_STEP_FILE")) << count << "\n";
}

TEST_CASE("ElasticAgent: restarts that make no progress stop the job",
          "[agent][progress]") {
  Harness h(2, /*max_restarts=*/10);
  h.options.launch.max_restarts_without_progress = 2;
  h.Start();
  // Attempt 0 trains 50 steps, then a worker fails: restart.
  WriteSteps(*h.launcher.workers[0], 50);
  h.launcher.Exit(1, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 4);
  // Restarts 1 and 2 fail before any rank steps.
  h.launcher.Exit(2, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.launcher.workers.size() == 6);
  CHECK_FALSE(h.exit_code.has_value());
  h.launcher.Exit(5, 1);
  h.loop.RunUntilIdle();
  REQUIRE(h.exit_code == 1);
  CHECK(h.launcher.workers.size() == 6);
  CHECK(h.rendezvous.no_retry_reports == 1);
  CHECK(h.rendezvous.restarts_used == 2);  // 8 of the 10 left unspent
  CHECK(h.console.err.find("FAILED") != std::string::npos);
}

TEST_CASE("ElasticAgent: without step counts the restart budget decides",
          "[agent][progress]") {
  Harness h(1, /*max_restarts=*/3);
  h.options.launch.max_restarts_without_progress = 1;
  h.Start();
  for (int attempt = 0; attempt < 4; ++attempt) {
    h.launcher.Exit(attempt, 1);
    h.loop.RunUntilIdle();
  }
  REQUIRE(h.exit_code == 1);
  CHECK(h.launcher.workers.size() == 4);  // every restart was made
  CHECK(h.rendezvous.no_retry_reports == 0);
}

TEST_CASE("ElasticAgent: an expired FileTimer scope kills its worker",
          "[agent][filetimer]") {
  Harness h(2, /*max_restarts=*/1);
  const std::string fifo = h.log_dir + "/timer_pipe";
  h.options.parent_env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1";
  h.options.parent_env["TORCHELASTIC_TIMER_FILE"] = fifo;
  h.options.parent_env["DDPRUN_STACKS"] = "0";  // fake pids: no dumps
  h.Start();
  REQUIRE(h.launcher.workers.size() == 2);
  for (const auto& w : h.launcher.workers) {
    CHECK(w->env("TORCHELASTIC_TIMER_FILE") == fifo);
  }
  // Worker 1 (pid 1001) enters `with expires(after=1)`.
  const double expires = h.loop.clock()->WallSeconds() + 1.0;
  {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    REQUIRE(fd >= 0);
    const std::string line =
        "{\"version\": 1, \"pid\": 1001, \"scope_id\": \"train.py#7\", "
        "\"expiration_time\": " +
        std::to_string(expires) + ", \"signal\": 9}\n";
    REQUIRE(::write(fd, line.data(), line.size()) ==
            static_cast<ssize_t>(line.size()));
    ::close(fd);
  }
  h.loop.Advance(500ms);
  CHECK(h.launcher.workers[1]->signals.empty());
  h.loop.Advance(600ms);
  // SIGKILL, as torch reaps it: a failed worker, the group restarts.
  REQUIRE_FALSE(h.launcher.workers[1]->signals.empty());
  CHECK(h.launcher.workers[1]->signals.front() == SIGKILL);
  REQUIRE(h.launcher.workers.size() == 4);
  REQUIRE(h.rendezvous.failure_reasons.size() == 1);
  CHECK_THAT(h.rendezvous.failure_reasons[0],
             Catch::Contains("killed by the FileTimer server: its FileTimer "
                             "scope 'train.py#7' expired"));
  h.agent.reset();
  CHECK(::access(fifo.c_str(), F_OK) != 0);  // removed with the agent
}

}  // namespace ddprun::agent
