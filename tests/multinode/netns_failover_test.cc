// Cross-host failover of the embedded rendezvous: agent a hosts it at the
// address of its own network namespace, agent b joins from another one.
// kill -9 of a must not end the job although b cannot bind a's address:
// the server named b its successor (its standby endpoint, b's own address,
// same port), b hosts a fresh server there, moves its client to it and the
// job is rebuilt, as after a server restart. The hosts are network
// namespaces joined by a bridge (10.231.9.0/24, which exists only inside
// them). Needs root and `ip netns`; skipped with a message otherwise.

#include "ddprun_catch.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "tests/multinode/elastic_job.h"
#include "tests/multinode/netns_testbed.h"

namespace ddprun::multinode {
namespace {

// A fresh namespace has every port free: the endpoint's port can be agreed
// in advance, as a real cluster's is.
constexpr int kPort = 29431;

TEST_CASE(
    "multinode: kill -9 of the agent hosting the rendezvous, the successor on "
    "another host takes over within 10 s",
    "[multinode][netns][failover]") {
  if (geteuid() != 0) {
    WARN("skipped: network namespaces need root");
    return;
  }
  NetnsTestbed net("ddpfo", 9);
  if (!net.ok()) {
    WARN("skipped: `ip netns` / veth / bridge setup failed on this machine");
    return;
  }
  TempDir dir;
  const std::string endpoint = net.Addr(1) + ":" + std::to_string(kPort);
  auto start = [&](size_t host, const std::string& node) {
    std::vector<std::string> argv = net.Exec(host);
    for (const std::string& a :
         Ddprun({"--nnodes=1:2", "--max_restarts=3", "--rdzv_backend=grpc",
                 "--rdzv_id=xfo", "--rdzv_endpoint=" + endpoint, "--no_python",
                 kData + "/env_worker.sh"})) {
      argv.push_back(a);
    }
    return std::make_unique<Child>(
        dir.path(), node, argv,
        std::map<std::string, std::string>{
            {"MN_OUT", dir.path()}, {"MN_NODE", node}, {"MN_FINISH_WS", "1"}});
  };
  std::unique_ptr<Child> a = start(1, "a");
  REQUIRE(WaitUntil(
      [&] { return a->Stderr().find("listening on") != std::string::npos; },
      15s));
  std::unique_ptr<Child> b = start(2, "b");
  INFO(a->Output() + b->Output());
  REQUIRE(WaitUntil(
      [&] {
        return StartedAt(ReadWorkerStarts(dir.path()), "a", 2) > 0 &&
               StartedAt(ReadWorkerStarts(dir.path()), "b", 2) > 0;
      },
      30s));
  // b is on another host: it joins, it does not stand by for a's port.
  CHECK(b->Stderr().find("already served on this host") == std::string::npos);
  // Heartbeats (1 s) tell b that it is the successor.
  std::this_thread::sleep_for(3s);
  const double killed_at = WallNow();
  a->Kill(SIGKILL);
  REQUIRE(a->Wait(5s) == 128 + SIGKILL);
  REQUIRE(WaitUntil(
      [&] { return StartedAt(ReadWorkerStarts(dir.path()), "b", 1) > 0; },
      30s));
  const double took =
      StartedAt(ReadWorkerStarts(dir.path()), "b", 1) - killed_at;
  std::printf(
      "[multinode] cross-host failover: the successor's workers restarted "
      "%.2f s after kill -9 of the hosting agent\n",
      took);
  CHECK(took <= 10.0);
  CHECK(b->Wait(20s) == 0);
  const std::string standby = net.Addr(2) + ":" + std::to_string(kPort);
  CHECK(b->Stderr().find("hosts it at " + standby) != std::string::npos);
  // The loss of a node spends no restart budget.
  for (const WorkerStart& s : ReadWorkerStarts(dir.path())) {
    CHECK(s.restart_count == 0);
  }
}

}  // namespace
}  // namespace ddprun::multinode
