// Cross-host failover of the embedded rendezvous: agent a hosts it at the
// address of its own network namespace, agent b joins from another one.
// kill -9 of a must not end the job although b cannot bind a's address:
// the server named b its successor (its standby endpoint, b's own address,
// same port), b hosts a fresh server there, moves its client to it and the
// job is rebuilt, as after a server restart. An agent on a's own host
// still takes a's port over first, and b then stays with it; a b cut off
// from a (a partition, not a's death) does not host. The hosts are
// network namespaces joined by a bridge (10.231.9-12.0/24, which exist
// only inside them). Needs root and `ip netns`; skipped with a
// message otherwise.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "tests/multinode/elastic_job.h"
#include "tests/multinode/netns_testbed.h"

namespace ddprun::multinode {
namespace {

// A fresh namespace has every port free: the endpoint's port can be agreed
// in advance, as a real cluster's is.
constexpr int kPort = 29431;

// Agents in the testbed's namespaces on one embedded rendezvous at host
// 1's address (host 1's first agent hosts it), running env_worker.sh.
class NetnsJob {
 public:
  NetnsJob(const NetnsTestbed& net, std::string nnodes, std::string finish_ws)
      : net_(net),
        nnodes_(std::move(nnodes)),
        finish_ws_(std::move(finish_ws)) {}

  // `extra`: more ddprun flags.
  Child& Start(size_t host, const std::string& node,
               std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = net_.Exec(host);
    for (const std::string& flag :
         {"--nnodes=" + nnodes_, std::string("--max_restarts=3"),
          std::string("--rdzv_backend=grpc"), std::string("--rdzv_id=xfo"),
          "--rdzv_endpoint=" + Endpoint(1), std::string("--no_python"),
          kData + "/env_worker.sh"}) {
      extra.push_back(flag);
    }
    for (const std::string& a : Ddprun(extra)) {
      argv.push_back(a);
    }
    agents_.push_back(std::make_unique<Child>(
        dir_.path(), node, argv,
        std::map<std::string, std::string>{{"MN_OUT", dir_.path()},
                                           {"MN_NODE", node},
                                           {"MN_FINISH_WS", finish_ws_}}));
    return *agents_.back();
  }
  // Host i's address with `port`.
  std::string Endpoint(size_t i, int port = kPort) const {
    return net_.Addr(i) + ":" + std::to_string(port);
  }
  double StartedAt(const std::string& node, int world_size) const {
    return multinode::StartedAt(ReadWorkerStarts(dir_.path()), node,
                                world_size);
  }
  bool NoRestartSpent() const {
    for (const WorkerStart& s : ReadWorkerStarts(dir_.path())) {
      if (s.restart_count != 0) return false;
    }
    return true;
  }
  std::string Outputs() const {
    std::string all;
    for (const auto& a : agents_) all += a->Output();
    return all;
  }

 private:
  const NetnsTestbed& net_;
  const std::string nnodes_, finish_ws_;
  TempDir dir_;
  std::vector<std::unique_ptr<Child>> agents_;
};

// Starts `node` on host 1 and waits until it hosts the rendezvous.
Child& StartHost(NetnsJob& job, const std::string& node) {
  Child& a = job.Start(1, node);
  REQUIRE(WaitUntil(
      [&] { return a.Stderr().find("listening on") != std::string::npos; },
      15s));
  return a;
}

// Whether every one of `nodes` started workers in a world of `world_size`.
bool AllStarted(const NetnsJob& job, const std::vector<std::string>& nodes,
                int world_size) {
  for (const std::string& node : nodes) {
    if (job.StartedAt(node, world_size) == 0) return false;
  }
  return true;
}

// Once every agent heard who the successor is (heartbeats, 1 s): kill -9 of
// the hosting agent `a`. Returns when it happened (WallNow).
double KillHosting(Child& a) {
  // A fixed pause: an agent learns the successor from a heartbeat answer
  // (1 s) and shows it nowhere (no log line, nothing in --status), so 3
  // heartbeats' time is the only condition there is.
  std::this_thread::sleep_for(3s);
  return KillHostingAgent(a);
}

// The survivors (`agents`, named `nodes`) end well, none of them ever ran
// in a world of one (one server: a second one would split them), and no
// restart budget was spent.
void CheckSurvivorsTogether(const NetnsJob& job,
                            const std::vector<Child*>& agents,
                            const std::vector<std::string>& nodes) {
  for (Child* agent : agents) CHECK(agent->Wait(20s) == 0);
  for (const std::string& node : nodes) CHECK(job.StartedAt(node, 1) == 0);
  CHECK(job.NoRestartSpent());
}

TEST_CASE(
    "multinode: kill -9 of the agent hosting the rendezvous, the successor on "
    "another host takes over within 10 s",
    "[multinode][netns][failover]") {
  if (geteuid() != 0) DDPRUN_SKIP_UNLESS_CI("network namespaces need root");
  NetnsTestbed net("ddpfo", 9);
  if (!net.ok())
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  NetnsJob job(net, "1:2", "1");
  Child& a = StartHost(job, "a");
  // b stands by at its own address, on a port of its choosing.
  Child& b = job.Start(2, "b", {"--rdzv_conf=standby_port=29432"});
  INFO(job.Outputs());
  REQUIRE(WaitUntil(
      [&] { return job.StartedAt("a", 2) > 0 && job.StartedAt("b", 2) > 0; },
      30s));
  // b is on another host: it joins, it does not stand by for a's port.
  CHECK(b.Stderr().find("already served on this host") == std::string::npos);
  const double killed_at = KillHosting(a);
  REQUIRE(WaitUntil([&] { return job.StartedAt("b", 1) > 0; }, 30s));
  const double took = job.StartedAt("b", 1) - killed_at;
  std::printf(
      "[multinode] cross-host failover: the successor's workers restarted "
      "%.2f s after kill -9 of the hosting agent\n",
      took);
  CHECK(took <= 10.0);
  CHECK(b.Wait(20s) == 0);
  CHECK(b.Stderr().find("hosts it at " + job.Endpoint(2, 29432)) !=
        std::string::npos);
  // The loss of a node spends no restart budget.
  CHECK(job.NoRestartSpent());
}

TEST_CASE(
    "multinode: with a survivor on the hosting agent's host, it takes the "
    "port over and the successor elsewhere stays with it",
    "[multinode][netns][failover]") {
  if (geteuid() != 0) DDPRUN_SKIP_UNLESS_CI("network namespaces need root");
  NetnsTestbed net("ddpfp", 10);
  if (!net.ok())
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  // a and c on host 1 (a hosts, c stands by for its port), b on host 2.
  NetnsJob job(net, "1:3", "2");
  Child& a = StartHost(job, "a");
  Child& c = job.Start(1, "c");
  Child& b = job.Start(2, "b");
  INFO(job.Outputs());
  REQUIRE(WaitUntil([&] { return AllStarted(job, {"a", "b", "c"}, 3); }, 30s));
  const double killed_at = KillHosting(a);
  // One server, a's port on host 1.
  REQUIRE(WaitUntil([&] { return AllStarted(job, {"b", "c"}, 2); }, 30s));
  std::printf(
      "[multinode] same-host takeover with a cross-host successor: the "
      "survivors restarted %.2f s after kill -9 of the hosting agent\n",
      job.StartedAt("b", 2) - killed_at);
  CheckSurvivorsTogether(job, {&b, &c}, {"b", "c"});
  CHECK(c.Stderr().find("hosts it now") != std::string::npos);
  CHECK(b.Stderr().find("successor") == std::string::npos);
}

TEST_CASE(
    "multinode: after the hosting agent's kill -9 every agent on other hosts "
    "moves to the successor",
    "[multinode][netns][failover]") {
  if (geteuid() != 0) DDPRUN_SKIP_UNLESS_CI("network namespaces need root");
  NetnsTestbed net("ddpfq", 11);
  if (!net.ok())
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  // a hosts on host 1; b (host 2) and d (host 0) join. The successor is
  // the smaller node id of b and d; the other one only moves.
  NetnsJob job(net, "1:3", "2");
  Child& a = StartHost(job, "a");
  Child& b = job.Start(2, "b");
  Child& d = job.Start(0, "d");
  INFO(job.Outputs());
  REQUIRE(WaitUntil([&] { return AllStarted(job, {"a", "b", "d"}, 3); }, 30s));
  const double killed_at = KillHosting(a);
  REQUIRE(WaitUntil([&] { return AllStarted(job, {"b", "d"}, 2); }, 30s));
  std::printf(
      "[multinode] cross-host failover of 3 agents: the survivors restarted "
      "%.2f s after kill -9 of the hosting agent\n",
      std::max(job.StartedAt("b", 2), job.StartedAt("d", 2)) - killed_at);
  CheckSurvivorsTogether(job, {&b, &d}, {"b", "d"});
  const std::string hosted = b.Stderr() + d.Stderr();
  CHECK(hosted.find("this agent, its successor, hosts it at") !=
        std::string::npos);
  CHECK(hosted.find("moving to its successor at") != std::string::npos);
}

TEST_CASE(
    "multinode: a successor cut off from the hosting agent does not host a "
    "second server",
    "[multinode][netns][failover]") {
  if (geteuid() != 0) DDPRUN_SKIP_UNLESS_CI("network namespaces need root");
  NetnsTestbed net("ddpfr", 12);
  if (!net.ok())
    DDPRUN_SKIP_UNLESS_CI("`ip netns` / veth / bridge setup failed");
  NetnsJob job(net, "1:2", "1");
  Child& a = StartHost(job, "a");
  Child& b = job.Start(2, "b", {"--rdzv_conf=connection_lost_timeout=6"});
  INFO(job.Outputs());
  REQUIRE(WaitUntil([&] { return AllStarted(job, {"a", "b"}, 2); }, 30s));
  // b heard that it is the successor (a heartbeat answer, 1 s; shown
  // nowhere, so a fixed pause of 3 heartbeats as in KillHosting).
  std::this_thread::sleep_for(3s);
  // a's host is cut off: to b it does not answer at all (no refusal), as
  // if it were down. b must not go on with a job of its own beside a's.
  REQUIRE(net.Run(net.Host(1), "link set eth0 down"));
  REQUIRE(WaitUntil([&] { return job.StartedAt("a", 1) > 0; }, 20s));
  CHECK(a.Wait(15s) == 0);
  // b gives up after connection_lost_timeout instead.
  CHECK(b.Wait(25s) == 1);
  CHECK(job.StartedAt("b", 1) == 0);
  CHECK(b.Stderr().find("not failing over to its successor") !=
        std::string::npos);
  CHECK(b.Stderr().find("hosts it at") == std::string::npos);
}

}  // namespace
}  // namespace ddprun::multinode
