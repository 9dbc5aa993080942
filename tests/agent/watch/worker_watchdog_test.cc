// The hang watchdog's state machine on a manual loop and a fake probe (no
// sleeps), and the real /proc probe on a real stopped child.

#include "ddprun_catch.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "agent/watch/worker_watchdog.h"
#include "tests/agent/fake_worker_probe.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using ddprun::testing::ManualEventLoop;
using testing::FakeWorkerProbe;

struct WatchdogHarness {
  explicit WatchdogHarness(Clock::Duration timeout = 2s)
      : start(loop.clock()->Now()),
        watchdog(&loop, &probe, timeout,
                 [this](const WorkerWatchdog::Stuck& s) {
                   reports.push_back(s);
                   report_times.push_back(loop.clock()->Now() - start);
                 }) {}

  // Advances the clock in 10 ms steps for `d`, running due timers.
  void Run(Clock::Duration d) {
    for (Clock::Duration t{}; t < d; t += 10ms) loop.Advance(10ms);
  }

  ManualEventLoop loop;
  FakeWorkerProbe probe;
  Clock::TimePoint start;
  WorkerWatchdog watchdog;
  std::vector<WorkerWatchdog::Stuck> reports;
  std::vector<Clock::Duration> report_times;
};

TEST_CASE("WorkerWatchdog: check interval is timeout/10 within [50 ms, 1 s]",
          "[agent][watchdog]") {
  ManualEventLoop loop;
  FakeWorkerProbe probe;
  auto interval = [&](Clock::Duration timeout) {
    return WorkerWatchdog(&loop, &probe, timeout, nullptr).interval();
  };
  CHECK(interval(2s) == 200ms);
  CHECK(interval(100ms) == 50ms);
  CHECK(interval(60s) == 1s);
}

TEST_CASE("WorkerWatchdog: a worker stopped for the timeout is reported once",
          "[agent][watchdog]") {
  WatchdogHarness h;
  h.watchdog.Watch(0, 100, "");
  h.watchdog.Watch(1, 101, "");
  h.Run(1s);
  h.probe.stopped.insert(101);
  const Clock::Duration stopped_at = h.loop.clock()->Now() - h.start;
  h.Run(10s);
  REQUIRE(h.reports.size() == 1);
  CHECK(h.reports[0].local_rank == 1);
  CHECK(h.reports[0].pid == 101);
  CHECK(h.reports[0].reason == WorkerWatchdog::Reason::kStopped);
  CHECK(h.reports[0].stuck_for >= 2s);
  // Within timeout + 2 intervals of the stop, never before the timeout.
  CHECK(h.report_times[0] - stopped_at >= 2s);
  CHECK(h.report_times[0] - stopped_at <= 2s + 2 * h.watchdog.interval());
  // The reported worker is no longer watched; the other one still is.
  CHECK(h.watchdog.watched() == 1);
}

TEST_CASE("WorkerWatchdog: stops shorter than the timeout are not hangs",
          "[agent][watchdog]") {
  WatchdogHarness h;
  h.watchdog.Watch(0, 100, "");
  for (int i = 0; i < 5; ++i) {
    h.probe.stopped.insert(100);
    h.Run(1500ms);
    h.probe.stopped.erase(100);
    h.Run(300ms);
  }
  CHECK(h.reports.empty());
}

TEST_CASE("WorkerWatchdog: heartbeat silence counts only after a first touch",
          "[agent][watchdog]") {
  WatchdogHarness h;
  h.watchdog.Watch(0, 100, "/hb0");
  h.watchdog.Watch(1, 101, "/hb1");
  // Rank 1 never touches its file (a trainer without Heartbeat()): only the
  // stopped rule applies to it.
  for (int i = 0; i < 20; ++i) {
    h.probe.Touch("/hb0");
    h.Run(500ms);
  }
  CHECK(h.reports.empty());
  // Rank 0 goes silent while still running (a deadlock, an endless loop).
  h.probe.Touch("/hb0");
  const Clock::Duration silent_at = h.loop.clock()->Now() - h.start;
  h.Run(5s);
  REQUIRE(h.reports.size() == 1);
  CHECK(h.reports[0].local_rank == 0);
  CHECK(h.reports[0].reason == WorkerWatchdog::Reason::kNoHeartbeat);
  CHECK(h.report_times[0] - silent_at >= 2s);
  CHECK(h.report_times[0] - silent_at <= 2s + 2 * h.watchdog.interval());
}

TEST_CASE("WorkerWatchdog: a stopped worker is named stopped, not silent",
          "[agent][watchdog]") {
  WatchdogHarness h;
  h.watchdog.Watch(0, 100, "/hb0");
  h.probe.Touch("/hb0");
  h.Run(1s);
  h.probe.stopped.insert(100);
  h.Run(5s);
  REQUIRE(h.reports.size() == 1);
  CHECK(h.reports[0].reason == WorkerWatchdog::Reason::kStopped);
  CHECK(std::string(WatchdogReasonText(h.reports[0].reason)) ==
        "stopped (state T)");
}

TEST_CASE("WorkerWatchdog: DescribeStuck says why, for how long, the limit",
          "[agent][watchdog]") {
  WorkerWatchdog::Stuck stuck;
  stuck.reason = WorkerWatchdog::Reason::kNoHeartbeat;
  stuck.stuck_for = 1549ms;
  CHECK(DescribeStuck(stuck, 1.5) ==
        "without a heartbeat for 1.5 s (--watchdog_timeout=1.5)");
  stuck.reason = WorkerWatchdog::Reason::kStopped;
  stuck.stuck_for = 2100ms;
  CHECK(DescribeStuck(stuck, 2) ==
        "stopped (state T) for 2.1 s (--watchdog_timeout=2)");
}

TEST_CASE("WorkerWatchdog: Forget/ForgetAll cancel the check timer",
          "[agent][watchdog]") {
  WatchdogHarness h;
  h.watchdog.Watch(0, 100, "");
  h.watchdog.Watch(1, 101, "");
  CHECK(h.loop.pending_timers() == 1);
  h.watchdog.Forget(0);
  CHECK(h.loop.pending_timers() == 1);
  h.watchdog.ForgetAll();
  CHECK(h.loop.pending_timers() == 0);
  h.probe.stopped = {100, 101};
  h.Run(5s);
  CHECK(h.reports.empty());
}

TEST_CASE("WorkerWatchdog: the /proc probe sees a real SIGSTOP and touches",
          "[agent][watchdog]") {
  std::unique_ptr<WorkerProbe> probe = MakeProcWorkerProbe();
  pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  REQUIRE(child > 0);
  CHECK_FALSE(probe->IsStopped(child));
  kill(child, SIGSTOP);
  int status = 0;
  REQUIRE(waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
  CHECK(probe->IsStopped(child));
  kill(child, SIGCONT);
  REQUIRE(waitpid(child, &status, WCONTINUED) == child);
  CHECK_FALSE(probe->IsStopped(child));
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  CHECK_FALSE(probe->IsStopped(child));  // gone

  char tmpl[] = "/tmp/ddprun_watchdog_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/heartbeat";
  CHECK_FALSE(probe->HeartbeatStamp(file).has_value());
  std::ofstream(file).put('x');
  std::optional<int64_t> first = probe->HeartbeatStamp(file);
  REQUIRE(first.has_value());
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 678}};
  REQUIRE(utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);
  std::optional<int64_t> second = probe->HeartbeatStamp(file);
  REQUIRE(second.has_value());
  CHECK(*second != *first);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace ddprun::agent
