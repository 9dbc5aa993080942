// kill -9 of one agent process: the survivors re-rendezvous within the
// issue's 5 s target, with default heartbeat settings (1 s / 3 s).
#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "tests/rendezvous/rendezvous_fixture.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {
namespace {

using Steady = std::chrono::steady_clock;

// One rdzv_test_agent process (tests/support/process.h) whose stdout is
// read back.
class AgentProcess {
 public:
  AgentProcess(const std::string& endpoint, const std::string& node, int min,
               int max)
      : process_(Options(endpoint, node, min, max)) {}
  void Kill() {
    process_.Signal(SIGKILL);
    process_.Wait(std::chrono::seconds(10));
  }
  // True once stdout contains `text` (read until `deadline`; false also when
  // the agent exited without printing it).
  bool WaitFor(const std::string& text, Steady::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Steady::now());
    process_.WaitForOutput(text, std::max(left, std::chrono::milliseconds(0)));
    output_ = process_.Stdout();
    return output_.find(text) != std::string::npos;
  }
  const std::string& output() const { return output_; }

 private:
  static ddprun::testing::ProcessOptions Options(const std::string& endpoint,
                                                 const std::string& node,
                                                 int min, int max) {
    ddprun::testing::ProcessOptions o;
    o.argv = {std::string(DDPRUN_BIN_DIR) + "/rdzv_test_agent", endpoint, node,
              std::to_string(min), std::to_string(max)};
    o.name = "agent_" + node;
    o.own_process_group = false;
    return o;
  }

  ddprun::testing::Process process_;
  std::string output_;
};

TEST_CASE(
    "RendezvousServer: survivors of a kill -9 re-form once the heartbeat "
    "timeout drops it",
    "[rendezvous][process]") {
  // rdzv_test_agent's job config: the client's default heartbeat_timeout.
  const double heartbeat_timeout_s = 3;
  testing::RendezvousFixture rdzv;
  const std::string endpoint = rdzv.endpoint();
  AgentProcess a(endpoint, "a", 2, 3), b(endpoint, "b", 2, 3),
      c(endpoint, "c", 2, 3);
  const auto start_deadline = Steady::now() + std::chrono::seconds(20);
  for (AgentProcess* p : {&a, &b, &c}) {
    REQUIRE(p->WaitFor("JOINED round=1", start_deadline));
    CHECK_THAT(p->output(), Catch::Contains("group_world_size=3"));
  }
  const auto killed = Steady::now();
  c.Kill();
  const auto deadline =
      killed + std::chrono::milliseconds(static_cast<int>(
                   1000 * test_timing::ReactionBoundS(heartbeat_timeout_s)));
  REQUIRE(a.WaitFor("JOINED round=2 ", deadline));
  REQUIRE(b.WaitFor("JOINED round=2 ", deadline));
  const double took =
      std::chrono::duration<double>(Steady::now() - killed).count();
  INFO("survivors re-formed " << took << " s after kill -9");
  CHECK(took <= test_timing::ReactionBoundS(heartbeat_timeout_s));
  CHECK_THAT(a.output(), Catch::Contains("'c'") &&
                             Catch::Contains("no heartbeat") &&
                             Catch::Contains("group_world_size=2"));
}

}  // namespace
}  // namespace ddprun::rendezvous
