// Worker faults on one of 2 nodes (2 ddprun agents, a ddprun-rendezvous
// server, loopback): SIGKILL, SIGSEGV, exit 1 and a hang (SIGSTOP beyond
// --watchdog_timeout). The job must finish with the uninterrupted result,
// losing at most one checkpoint interval, and leave no process behind.

#include "ddprun_catch.h"

#include <signal.h>

#include "tests/chaos/chaos_job.h"

namespace ddprun::chaos {
namespace {

// Starts the 2-node job on a fresh server.
void StartJob(Scenario& s, const Workload& w, int nproc,
              const std::vector<std::string>& extra_flags = {}) {
  auto& server = s.StartServer(0);
  REQUIRE(server.port() > 0);
  TwoNodes nodes;
  nodes.port = server.port();
  nodes.nproc = nproc;
  nodes.extra_flags = extra_flags;
  StartTwoNodes(s, nodes, w);
}

void WaitBothDone(Scenario& s, Child& a, Child& b) {
  const int code_a = a.Wait(40s), code_b = b.Wait(10s);
  INFO(s.Logs());
  REQUIRE(code_a == 0);
  REQUIRE(code_b == 0);
}

// A signal from outside to worker `local_rank` of node b once checkpoint 10
// exists.
void SignalScenario(const std::string& what, int sig, int nproc,
                    const std::vector<std::string>& extra_flags = {}) {
  Scenario s(what.substr(0, what.find(' ')));
  Workload w;
  REQUIRE(Baseline(2 * nproc, w.steps).has_value());
  StartJob(s, w, nproc, extra_flags);
  if (!s.WaitSaved(10)) FAIL("no checkpoint 10\n" << s.Logs());
  const int pid = s.WorkerPid("b", 0);
  REQUIRE(pid > 0);
  Expect e;
  e.what = what;
  e.world = 2 * nproc;
  e.t0 = WallNow();
  e.saved_before = s.LastSaved();
  REQUIRE(::kill(pid, sig) == 0);
  WaitBothDone(s, s.agent(0), s.agent(1));
  if (sig == SIGSTOP) {
    CHECK(multinode::ReadFile(s.dir() + "/b.err")
              .find("watchdog: local_rank 0 (pid " + std::to_string(pid) +
                    ") hung, stopped (state T)") != std::string::npos);
  }
  CheckRecovered(s, w, e);
}

// Global rank 1 (node b) fails from inside at step 15 (--fail_mode); node
// b's agent output must show `b_err_says`.
void InsideScenario(const std::string& what, const std::string& mode,
                    const std::string& b_err_says,
                    const std::vector<std::string>& extra_flags = {}) {
  Scenario s(mode);
  Workload w;
  w.extra = {"--fail_step", "15", "--fail_rank", "1", "--fail_mode", mode};
  REQUIRE(Baseline(2, w.steps).has_value());
  StartJob(s, w, 1, extra_flags);
  WaitBothDone(s, s.agent(0), s.agent(1));
  std::vector<Event> events = ReadEvents(s.out());
  Expect e;
  e.what = what;
  for (const Event& ev : events) {
    if (ev.kind == "fail") e.t0 = ev.t;
  }
  REQUIRE(e.t0 > 0);
  e.saved_before = SavedBefore(events, e.t0);
  CHECK(e.saved_before == 10);
  CHECK(multinode::ReadFile(s.dir() + "/b.err").find(b_err_says) !=
        std::string::npos);
  CheckRecovered(s, w, e);
}

}  // namespace

TEST_CASE("chaos: worker SIGKILL on one of 2 nodes", "[chaos]") {
  SignalScenario("worker SIGKILL", SIGKILL, /*nproc=*/2);
}

TEST_CASE("chaos: worker SIGSEGV on one of 2 nodes", "[chaos]") {
  InsideScenario("worker SIGSEGV", "segv", "failed (exitcode: -11)");
}

TEST_CASE("chaos: worker exit 1 on one of 2 nodes", "[chaos]") {
  InsideScenario("worker exit 1", "exit", "injected failure at step 15");
}

TEST_CASE("chaos: worker hang (SIGSTOP) killed by --watchdog_timeout",
          "[chaos][watchdog]") {
  SignalScenario("worker hang (SIGSTOP)", SIGSTOP, /*nproc=*/1,
                 {"--watchdog_timeout=2"});
}

TEST_CASE("chaos: worker deadlock (no heartbeat) killed by --watchdog_timeout",
          "[chaos][watchdog]") {
  // The worker calls ddprun::worker::Heartbeat() every step, then sleeps
  // forever at step 15: running, not stopped, only the heartbeat is silent.
  InsideScenario("worker deadlock (silent heartbeat)", "hang",
                 "hung, without a heartbeat for 2.", {"--watchdog_timeout=2"});
}

}  // namespace ddprun::chaos
