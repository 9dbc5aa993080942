// Node loss by a cut network link: the server and two agents each run in a
// network namespace of their own, joined by veth pairs to a bridge in a
// fourth namespace (10.231.7.0/24, which exists only inside these
// namespaces: nothing touches the root namespace's interfaces or routes).
// Needs root and `ip netns`; skipped with a message otherwise.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <unistd.h>

#include <cstdio>
#include <set>

#include "tests/multinode/multinode_util.h"
#include "tests/multinode/netns_testbed.h"

namespace ddprun::multinode {
namespace {

TEST_CASE("multinode: a node whose link is cut is dropped, the other goes on",
          "[multinode][netns]") {
  if (geteuid() != 0) DDPRUN_SKIP_UNLESS_CI("network namespaces need root");
  NetnsTestbed net("ddpmn", 7);
  if (!net.ok())
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  TempDir dir;
  RendezvousServerProcess server(dir.path(), 0, net.Exec(0), net.Addr(0));
  INFO(server.child().Output());
  REQUIRE(server.port() > 0);
  std::vector<std::unique_ptr<Child>> agents;
  for (size_t i = 1; i <= 2; ++i) {
    std::vector<std::string> argv = net.Exec(i);
    for (const std::string& a :
         Ddprun({"--nnodes=1:2", "--rdzv_backend=grpc", "--rdzv_id=netns",
                 "--rdzv_endpoint=" + net.Addr(0) + ":" +
                     std::to_string(server.port()),
                 "--rdzv_conf=connection_lost_timeout=4", "--no_python",
                 kData + "/env_worker.sh"})) {
      argv.push_back(a);
    }
    std::string node = i == 1 ? "a" : "b";
    agents.push_back(std::make_unique<Child>(
        dir.path(), node, argv,
        std::map<std::string, std::string>{
            {"MN_OUT", dir.path()}, {"MN_NODE", node}, {"MN_FINISH_WS", "1"}}));
  }
  INFO(agents[0]->Output() + agents[1]->Output());
  auto count = [&](const std::function<bool(const WorkerStart&)>& pred) {
    int n = 0;
    for (const WorkerStart& s : ReadWorkerStarts(dir.path())) n += pred(s);
    return n;
  };
  REQUIRE(WaitUntil(
      [&] { return count([](auto& s) { return s.world_size == 2; }) == 2; },
      20s));
  // The nodes reached the server over the namespaces' link, and MASTER_ADDR
  // is a node's own namespace address.
  CHECK(server.child().Stderr().find("master 10.231.7.") != std::string::npos);
  CHECK(agents[0]->Running());
  REQUIRE(net.Run(net.Host(2), "link set eth0 down"));
  const auto cut = SteadyClock::now();
  REQUIRE(WaitUntil(
      [&] {
        return count([](auto& s) {
                 return s.node == "a" && s.world_size == 1;
               }) == 1;
      },
      15s));
  std::printf(
      "[multinode] node a restarted alone %.2f s after b's link went "
      "down\n",
      std::chrono::duration<double>(SteadyClock::now() - cut).count());
  CHECK(agents[0]->Wait(10s) == 0);
  // The cut-off node gives up once the server was unreachable for
  // connection_lost_timeout, instead of hanging with its workers.
  const int cut_off = agents[1]->Wait(15s);
  std::printf("[multinode] node b exited %d, %.2f s after its link went down\n",
              cut_off,
              std::chrono::duration<double>(SteadyClock::now() - cut).count());
  CHECK(cut_off == 1);
}

}  // namespace
}  // namespace ddprun::multinode
