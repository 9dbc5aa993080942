// A network partition: the server and two agents each run in a network
// namespace of their own, joined by veth pairs to a bridge in a fourth
// namespace (10.231.8.0/24 exists only inside these namespaces; nothing
// touches the root namespace's interfaces or routes). Node b's link goes
// down mid-training and comes back. Needs root and `ip`; skipped otherwise.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/chaos/chaos_job.h"
#include "tests/multinode/netns_testbed.h"

namespace ddprun::chaos {

using multinode::kIpTool;
using multinode::NetnsTestbed;
namespace {

// First start event after `t0` for which `pred` holds.
std::optional<Event> StartAfterWhere(
    const Scenario& s, double t0,
    const std::function<bool(const Event&)>& pred) {
  for (const Event& e : ReadEvents(s.out())) {
    if (e.kind == "start" && e.t > t0 && pred(e)) return e;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("chaos: network partition of one node (link down, then up)",
          "[chaos][netns][root]") {
  if (::geteuid() != 0 || ::access(kIpTool, X_OK) != 0) {
    DDPRUN_SKIP_UNLESS_CI("network namespaces need root and " << kIpTool);
  }
  NetnsTestbed net("ddpch", 8);
  if (!net.ok()) {
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  }
  Scenario s("partition");
  // No GLOO_SOCKET_IFNAME: the host name resolves to loopback in these
  // namespaces, so Gloo must pick the address that routes to MASTER_ADDR.
  Workload w;
  w.steps = 100;  // 10 s of training: b is back before the end
  w.step_ms = 100;
  REQUIRE(Baseline(2, w.steps).has_value());
  auto& server = s.StartServer(0, net.Exec(0), net.Addr(0));
  REQUIRE(server.port() > 0);
  TwoNodes nodes;
  nodes.port = server.port();
  nodes.nnodes = "1:2";
  nodes.host = net.Addr(0);
  nodes.rdzv_conf = kNodeLossRdzvConf;
  nodes.prefixes = {net.Exec(1), net.Exec(2)};
  StartTwoNodes(s, nodes, w);
  if (!s.WaitForEvents(
          [](const std::vector<Event>& events) {
            bool together = false;
            for (const Event& e : events) {
              if (e.kind == "start") together = e.world == 2;
              if (together && e.kind == "saved" && e.step >= 10) return true;
            }
            return false;
          },
          30s)) {
    FAIL("not training together\n" << s.Logs());
  }
  const double cut = WallNow();
  const int64_t saved_before = s.LastSaved();
  REQUIRE(net.Run(net.Host(2), "link set eth0 down"));
  // a notices (b's heartbeats stop reaching the server) and goes on alone.
  const bool alone = s.WaitForEvents(
      [&](const std::vector<Event>&) {
        return StartAfterWhere(s, cut,
                               [](const Event& e) { return e.world == 1; })
            .has_value();
      },
      20s);
  // The partition lasts down_for seconds on purpose: its length is the
  // scenario (no condition ends it).
  const double down_for = 5.0;
  std::this_thread::sleep_for(
      std::chrono::duration<double>(std::max(0.0, cut + down_for - WallNow())));
  const double up = WallNow();
  REQUIRE(net.Run(net.Host(2), "link set eth0 up"));
  // b comes back: the job scales up to both nodes again.
  const bool rejoined = s.WaitForEvents(
      [&](const std::vector<Event>&) {
        return StartAfterWhere(s, up,
                               [](const Event& e) { return e.world == 2; })
            .has_value();
      },
      20s);
  const int code_a = s.agent(0).Wait(40s), code_b = s.agent(1).Wait(15s);
  INFO(s.Logs());
  REQUIRE(alone);
  CHECK(rejoined);
  CHECK(code_a == 0);
  CHECK(code_b == 0);
  std::optional<Event> alone_start =
      StartAfterWhere(s, cut, [](const Event& e) { return e.world == 1; });
  REQUIRE(alone_start.has_value());
  CHECK(alone_start->step >= saved_before);
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  // The world size went 2 -> 1 -> 2: equal up to float rounding.
  CHECK(MaxAbsDiff(*got, *Baseline(2, w.steps)) <= 1e-4);
  CHECK(s.NoOrphans());
  PrintRecovery("network partition (node a going on alone)",
                alone_start->t - cut);
  if (std::optional<Event> back =
          StartAfterWhere(s, up, [](const Event& e) { return e.world == 2; })) {
    std::printf(
        "chaos: network partition healed: both nodes train again "
        "%.2f s after the link came back up\n",
        back->t - up);
  }
}

}  // namespace ddprun::chaos
