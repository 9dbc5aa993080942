// Node-level faults of a 2-node job: an agent killed with SIGKILL (with the
// remaining node still >= MIN, and below MIN), the rendezvous server killed
// and restarted, and one node's network link cut and restored (network
// namespaces, root only).

#include "ddprun_catch.h"
#include "reaction_bound.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "tests/chaos/chaos_job.h"

namespace ddprun::chaos {
namespace {

using multinode::ReadFile;
using multinode::WaitUntil;

// Both nodes train together (a start event with the full world size) and
// checkpoint `step` exists.
bool WaitTrainingTogether(Scenario& s, int world, int64_t step) {
  return s.WaitForEvents(
      [&](const std::vector<Event>& events) {
        bool together = false;
        for (const Event& e : events) {
          if (e.kind == "start") together = e.world == world;
          if (together && e.kind == "saved" && e.step >= step) return true;
        }
        return false;
      },
      30s);
}

// A 2-node job with `rdzv_conf` against the server on `port`, once it saved
// checkpoint 10.
void StartJobUntilSaved(Scenario& s, const Workload& w, int port,
                        const std::string& rdzv_conf) {
  TwoNodes nodes;
  nodes.port = port;
  nodes.rdzv_conf = rdzv_conf;
  StartTwoNodes(s, nodes, w);
  if (!s.WaitSaved(10)) FAIL("no checkpoint 10\n" << s.Logs());
}

// A job resubmitted after a failure: one agent with both ranks resumes from
// the checkpoints the failed job left and must reach the uninterrupted
// result bit for bit.
void CheckResubmission(Scenario& s, const Workload& w, int64_t saved_before) {
  const double t = WallNow();
  Child& again =
      s.StartAgent("resubmitted", {"--standalone", "--nproc_per_node=2"}, w);
  const int code = again.Wait(40s);
  INFO(s.Logs());
  REQUIRE(code == 0);
  std::optional<Event> start = s.StartAfter(t);
  REQUIRE(start.has_value());
  CHECK(start->step >= saved_before);
  std::optional<Result> got = ReadResult(s.out());
  std::optional<Result> base = Baseline(2, w.steps);
  REQUIRE(got.has_value());
  REQUIRE(base.has_value());
  CHECK(Fnv(*got) == Fnv(*base));
}

}  // namespace

TEST_CASE("chaos: agent SIGKILL with --nnodes=1:2, the survivor finishes",
          "[chaos]") {
  Scenario s("agentmin");
  Workload w;
  REQUIRE(Baseline(2, w.steps).has_value());
  auto& server = s.StartServer(0);
  REQUIRE(server.port() > 0);
  TwoNodes nodes;
  nodes.port = server.port();
  nodes.nnodes = "1:2";
  nodes.rdzv_conf = kNodeLossRdzvConf;
  StartTwoNodes(s, nodes, w);
  if (!WaitTrainingTogether(s, 2, 10))
    FAIL("not training together\n" << s.Logs());
  KillAgentSurvivorFinishes(s, w, /*victim=*/s.agent(1),
                            /*survivor=*/s.agent(0),
                            "agent SIGKILL (MIN satisfied)", 40s);
}

TEST_CASE("chaos: agent SIGKILL with --nnodes=2:2 fails clearly in bounds",
          "[chaos]") {
  Scenario s("agentfail");
  Workload w;
  auto& server = s.StartServer(0);
  REQUIRE(server.port() > 0);
  StartJobUntilSaved(s, w, server.port(),
                     "heartbeat_timeout=2,last_call_timeout=1,join_timeout=4,"
                     "connection_lost_timeout=20");
  Child& a = s.agent(0);
  Child& b = s.agent(1);
  const auto killed = SteadyClock::now();
  const int64_t saved_before = s.LastSaved();
  b.Kill(SIGKILL);
  const int code = a.Wait(20s);
  const double took =
      std::chrono::duration<double>(SteadyClock::now() - killed).count();
  {
    INFO(s.Logs());
    REQUIRE(code == 1);
    // heartbeat_timeout (2 s) drops b, join_timeout (4 s) fails the round
    // below min_nodes; never a hang.
    CHECK(took < test_timing::ReactionBoundS(2 + 4));
    const std::string err = ReadFile(s.dir() + "/a.err");
    CHECK(err.find("rendezvous (grpc) failed:") != std::string::npos);
  }
  std::printf("chaos: agent SIGKILL (MIN violated) failed cleanly in %.2f s\n",
              took);
  CHECK(s.NoOrphans());
  // The checkpoints it left are intact: a resubmitted job finishes right.
  CheckResubmission(s, w, saved_before);
  CHECK(s.NoOrphans());
}

TEST_CASE("chaos: rendezvous server SIGKILL and restart mid-training",
          "[chaos]") {
  Scenario s("server");
  Workload w;
  w.steps = 60;  // long enough to outlast the server's absence
  REQUIRE(Baseline(2, w.steps).has_value());
  auto& server = s.StartServer(0);
  const int port = server.port();
  REQUIRE(port > 0);
  // The restarted server waits heartbeat_timeout for the agents to
  // re-register their round; 4 s leaves room for a loaded machine.
  StartJobUntilSaved(s, w, port,
                     "heartbeat_timeout=4,last_call_timeout=1,join_timeout=20,"
                     "connection_lost_timeout=20");
  Child& a = s.agent(0);
  Child& b = s.agent(1);
  const double t0 = WallNow();
  const auto killed = SteadyClock::now();
  server.child().Kill(SIGKILL);
  REQUIRE(server.child().Wait(5s) == 128 + SIGKILL);
  // A fixed outage on purpose: the scenario is a server that stays away
  // for a while (no condition ends it), then comes back on the same port.
  std::this_thread::sleep_for(1s);
  auto& again = s.StartServer(port);
  REQUIRE(again.port() == port);
  // Recovered once both agents re-registered their running round.
  const bool rebuilt = WaitUntil(
      [&] {
        return again.child().Stderr().find("rebuilt: all 2 nodes") !=
               std::string::npos;
      },
      20s);
  const double took =
      std::chrono::duration<double>(SteadyClock::now() - killed).count();
  const int code_a = a.Wait(40s), code_b = b.Wait(10s);
  INFO(s.Logs());
  REQUIRE(code_a == 0);
  REQUIRE(code_b == 0);
  CHECK(rebuilt);
  // The workers never noticed: no restart, the result is bit-exact.
  CHECK_FALSE(s.StartAfter(t0).has_value());
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  CHECK(Fnv(*got) == Fnv(*Baseline(2, w.steps)));
  CHECK(s.NoOrphans());
  PrintRecovery("rendezvous server SIGKILL + restart (1 s down)", took);
}

TEST_CASE(
    "chaos: agent hosting the embedded rendezvous SIGKILL, the survivor takes "
    "over and finishes",
    "[chaos]") {
  Scenario s("hostkill");
  Workload w;
  REQUIRE(Baseline(2, w.steps).has_value());
  // No separate server: node a (started first) hosts the rendezvous at
  // its endpoint in-process, node b joins it and stands by.
  const int port = multinode::FreeLoopbackPort();
  auto flags = [&](int node) {
    return GrpcFlags(port, s.marker(), "1:2", 1, node, "127.0.0.1",
                     kNodeLossRdzvConf);
  };
  Child& a = s.StartAgent("a", flags(0), w);
  REQUIRE(multinode::WaitUntil(
      [&] {
        return ReadFile(s.dir() + "/a.err").find("listening on") !=
               std::string::npos;
      },
      10s));
  Child& b = s.StartAgent("b", flags(1), w);
  if (!WaitTrainingTogether(s, 2, 10))
    FAIL("not training together\n" << s.Logs());
  const double took = KillAgentSurvivorFinishes(
      s, w, /*victim=*/a, /*survivor=*/b,
      "agent hosting the rendezvous SIGKILL (failover)", 60s);
  INFO(s.Logs());
  CHECK(ReadFile(s.dir() + "/b.err").find("hosts it now") != std::string::npos);
  // b, on the same host, takes the port over at its first unanswered
  // heartbeat (heartbeat_interval, 1 s by default), long before
  // connection_lost_timeout (20 s) would end it.
  CHECK(took <= test_timing::ReactionBoundS(1.0));
}

}  // namespace ddprun::chaos
