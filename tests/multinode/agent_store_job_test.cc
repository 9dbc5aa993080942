// Static multi-node jobs on the agent store: two ddprun agents on loopback
// (--nnodes=2 --node_rank=0/1 --master_addr=127.0.0.1 --master_port=P), the
// workers' c10d store served by node 0's agent on P beside the rendezvous.
// Debian's torch 1.13 Gloo workers (env:// and tcp://127.0.0.1:P), restarts
// after a worker failure (five in a row, every one must succeed), and the
// C++ worker runtime's rank_helper.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

std::vector<std::string> Node(int rank, int port, int nproc,
                              std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {
      "--nnodes=2", "--nproc_per_node=" + std::to_string(nproc),
      "--node_rank=" + std::to_string(rank), "--master_addr=127.0.0.1",
      "--master_port=" + std::to_string(port)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Runs both agents (node 1 first: it must wait for node 0) with `entry`;
// returns their exit codes and fills `log` with their output.
std::pair<int, int> RunJob(const TempDir& dir, int port, int nproc,
                           const std::vector<std::string>& entry,
                           std::map<std::string, std::string> env,
                           std::vector<std::string> extra, std::string* log) {
  env["MN_OUT"] = dir.path();
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  env["OMP_NUM_THREADS"] = "1";
  std::vector<std::unique_ptr<Child>> agents;
  for (int rank : {1, 0}) {
    std::vector<std::string> argv = Ddprun(Node(rank, port, nproc, extra));
    argv.insert(argv.end(), entry.begin(), entry.end());
    agents.push_back(std::make_unique<Child>(
        dir.path(), "node" + std::to_string(rank), argv, env));
  }
  const int code1 = agents[0]->Wait(150s);
  const int code0 = agents[1]->Wait(30s);
  *log =
      "node 0:\n" + agents[1]->Output() + "\nnode 1:\n" + agents[0]->Output();
  return {code0, code1};
}

const std::vector<std::string> kStoreJob = {"/usr/bin/python3", "-u",
                                            kData + "/store_job.py"};

void CheckRanks(const TempDir& dir, int world, int port, int restart_count) {
  for (int r = 0; r < world; ++r) {
    const std::string text =
        ReadFile(dir.path() + "/store_" + std::to_string(r) + ".json");
    INFO("rank " << r << ": " << text);
    REQUIRE(!text.empty());
    nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["rank"] == r);
    CHECK(j["sum"].get<double>() == world * (world + 1) / 2.0);
    CHECK(j["master"] == "127.0.0.1:" + std::to_string(port));
    CHECK(j["agent_store"] == "True");
    CHECK(j["restart_count"] == restart_count);
  }
}

TEST_CASE("agent store: torch 1.13 Gloo job on tcp://MASTER_ADDR:--master_port",
          "[multinode][python][agent_store]") {
  if (!HaveTorch()) DDPRUN_SKIP("no torch for /usr/bin/python3");
  TempDir dir;
  const int port = FreeLoopbackPort();
  std::string log;
  auto [c0, c1] =
      RunJob(dir, port, 2, kStoreJob, {{"STORE_INIT", "tcp"}}, {}, &log);
  INFO(log);
  REQUIRE(c0 == 0);
  REQUIRE(c1 == 0);
  CheckRanks(dir, 4, port, 0);
  // The agent logged that it serves the store on that very port.
  CHECK(log.find("agent store (the workers' c10d TCPStore) listening on "
                 "127.0.0.1:" +
                 std::to_string(port)) != std::string::npos);
}

TEST_CASE("agent store: a Gloo job restarts successfully five times in a row",
          "[multinode][python][agent_store]") {
  if (!HaveTorch()) DDPRUN_SKIP("no torch for /usr/bin/python3");
  for (int run = 0; run < 5; ++run) {
    INFO("run " << run);
    TempDir dir;
    const int port = FreeLoopbackPort();
    std::string log;
    // Rank 1 (node 1) fails on attempt 0 after the group formed; the round
    // that follows keeps --master_port and must start from a clean store.
    auto [c0, c1] = RunJob(dir, port, 1, kStoreJob, {{"STORE_FAIL_RANK", "1"}},
                           {"--max_restarts=1"}, &log);
    INFO(log);
    REQUIRE(c0 == 0);
    REQUIRE(c1 == 0);
    CheckRanks(dir, 2, port, 1);
    CHECK(log.find("agent store: rendezvous") != std::string::npos);
  }
}

TEST_CASE("agent store: a replaced node's round starts from an empty store",
          "[multinode][python][agent_store]") {
  // Node 1's agent dies (kill -9; its worker dies with it) after the group
  // formed, and a new node 1 joins: the next round keeps the restart count,
  // so its workers use the same key prefix as the first round's. Their Gloo
  // addresses must not be the dead round's.
  if (!HaveTorch()) DDPRUN_SKIP("no torch for /usr/bin/python3");
  TempDir dir;
  const int port = FreeLoopbackPort();
  std::map<std::string, std::string> env = {{"MN_OUT", dir.path()},
                                            {"PYTHON_EXEC", "/usr/bin/python3"},
                                            {"OMP_NUM_THREADS", "1"},
                                            {"STORE_HOLD", "1"}};
  auto start = [&](int rank, const std::string& name) {
    std::vector<std::string> argv =
        Ddprun(Node(rank, port, 1, {"--max_restarts=1"}));
    argv.insert(argv.end(), kStoreJob.begin(), kStoreJob.end());
    return std::make_unique<Child>(dir.path(), name, argv, env);
  };
  auto node0 = start(0, "node0");
  auto node1 = start(1, "node1");
  const bool held = WaitUntil(
      [&] {
        return access((dir.path() + "/held_0").c_str(), F_OK) == 0 &&
               access((dir.path() + "/held_1").c_str(), F_OK) == 0;
      },
      150s);
  INFO(node0->Output() + node1->Output());
  REQUIRE(held);
  node1->Kill(SIGKILL);
  REQUIRE(node1->Wait(10s) >= 0);
  auto node1b = start(1, "node1b");
  const int c1 = node1b->Wait(150s);
  const int c0 = node0->Wait(30s);
  INFO("node 0:\n" << node0->Output() << "\nnew node 1:\n" << node1b->Output());
  REQUIRE(c1 == 0);
  REQUIRE(c0 == 0);
  CheckRanks(dir, 2, port, 0);
}

#ifdef DDPRUN_RANK_HELPER
TEST_CASE("agent store: the C++ worker runtime connects through it",
          "[multinode][torch][agent_store]") {
  TempDir dir;
  const int port = FreeLoopbackPort();
  std::string log;
  auto [c0, c1] = RunJob(dir, port, 1, {DDPRUN_RANK_HELPER, "collectives"}, {},
                         {"--no_python"}, &log);
  INFO(log);
  REQUIRE(c0 == 0);
  REQUIRE(c1 == 0);
  CHECK(log.find("rank 0 of 2 ok backend gloo agent_store 1") !=
        std::string::npos);
  CHECK(log.find("rank 1 of 2 ok backend gloo agent_store 1") !=
        std::string::npos);
}
#endif

}  // namespace
}  // namespace ddprun::multinode
