// Two real ddprun agents with two workers each on loopback run a Gloo
// all-reduce across 4 ranks: through an external ddprun-rendezvous, through
// the rendezvous one agent hosts (is_host), and in static mode.

#include "ddprun_catch.h"

#include <nlohmann/json.hpp>

#include <set>

#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

struct Launch {
  std::vector<std::string> args;  // ddprun flags before the entrypoint
  std::vector<std::string> entry = {"/usr/bin/python3", "-u",
                                    kData + "/allreduce.py"};
};

// Starts one agent per flag set, waits for all (bounded), checks exit 0.
void RunAgents(const TempDir& dir, const std::vector<Launch>& launches,
               std::map<std::string, std::string> env = {}) {
  env["MN_OUT"] = dir.path();
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  env["OMP_NUM_THREADS"] = "1";
  std::vector<std::unique_ptr<Child>> agents;
  for (size_t i = 0; i < launches.size(); ++i) {
    std::vector<std::string> argv = Ddprun(launches[i].args);
    argv.insert(argv.end(), launches[i].entry.begin(), launches[i].entry.end());
    agents.push_back(std::make_unique<Child>(
        dir.path(), "agent" + std::to_string(i), argv, env));
  }
  for (auto& a : agents) {
    INFO(a->Output());
    REQUIRE(a->Wait(40s) == 0);
  }
}

// Reads allreduce_<rank>.json of `world` ranks and checks a user-visible
// 4-rank job: sum, distinct ranks, world size, node ranks, one restart count.
std::vector<nlohmann::json> CheckAllReduce(const TempDir& dir, int world) {
  std::vector<nlohmann::json> ranks;
  std::set<int> seen;
  std::set<int> restart_counts;
  for (int r = 0; r < world; ++r) {
    std::string text =
        ReadFile(dir.path() + "/allreduce_" + std::to_string(r) + ".json");
    INFO("rank " << r << ": " << text);
    REQUIRE(!text.empty());
    nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["rank"] == r);
    CHECK(j["dist_rank"] == r);
    CHECK(j["world_size"] == world);
    CHECK(j["sum"].get<double>() == world * (world + 1) / 2.0);
    CHECK(j["group_rank"] == r / 2);  // two workers per node
    seen.insert(j["rank"].get<int>());
    restart_counts.insert(j["restart_count"].get<int>());
    ranks.push_back(j);
  }
  CHECK(seen.size() == static_cast<size_t>(world));
  CHECK(restart_counts.size() == 1);
  return ranks;
}

TEST_CASE(
    "multinode: 2 agents x 2 workers all-reduce through ddprun-rendezvous",
    "[multinode][python]") {
  TempDir dir;
  RendezvousServerProcess server(dir.path(), 0);
  REQUIRE(server.port() > 0);
  const std::string ep = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::string> args = {"--nnodes=2", "--nproc_per_node=2",
                                   "--rdzv_backend=grpc", "--rdzv_id=ar1",
                                   "--rdzv_endpoint=" + ep};
  RunAgents(dir, {{args}, {args}});
  CheckAllReduce(dir, 4);
}

TEST_CASE("multinode: an agent hosts the rendezvous (is_host) for 2 x 2 ranks",
          "[multinode][python]") {
  TempDir dir;
  const std::string ep = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  std::vector<std::string> host = {
      "--nnodes=2",    "--nproc_per_node=2",    "--rdzv_backend=c10d",
      "--rdzv_id=ar2", "--rdzv_endpoint=" + ep, "--rdzv_conf=is_host=true"};
  std::vector<std::string> guest = host;
  guest.back() = "--rdzv_conf=is_host=false";
  RunAgents(dir, {{host}, {guest}});
  CheckAllReduce(dir, 4);
}

TEST_CASE("multinode: static mode, GROUP_RANK is --node_rank",
          "[multinode][python]") {
  TempDir dir;
  const std::string port = std::to_string(FreeLoopbackPort());
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes=2", "--nproc_per_node=2",
                                    "--node_rank=" + std::to_string(rank),
                                    "--master_addr=127.0.0.1",
                                    "--master_port=" + port};
  };
  // Node 1 first: it must wait for node 0 to host the rendezvous.
  RunAgents(dir, {{node(1)}, {node(0)}});
  std::vector<nlohmann::json> ranks = CheckAllReduce(dir, 4);
  // Workers meet at --master_addr:--master_port, as under torchrun: node 0's
  // agent serves their c10d store there beside the rendezvous.
  for (const auto& r : ranks) {
    std::string master = r["master"];
    CHECK(master == "127.0.0.1:" + port);
  }
}

#ifdef DDPRUN_HAVE_DDP_DEMO
TEST_CASE("multinode: 2 agents x 2 ddp_demo workers (C++ DDP over Gloo)",
          "[multinode][torch]") {
  TempDir dir;
  RendezvousServerProcess server(dir.path(), 0);
  REQUIRE(server.port() > 0);
  const std::string ep = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::string> args = {
      "--nnodes=2",     "--nproc_per_node=2",    "--rdzv_backend=grpc",
      "--rdzv_id=demo", "--rdzv_endpoint=" + ep, "--no_python"};
  Launch demo{args, {DDPRUN_DDP_DEMO, "--steps", "5"}};
  RunAgents(dir, {demo, demo});
  std::string all = ReadFile(dir.path() + "/agent0.out") +
                    ReadFile(dir.path() + "/agent1.out");
  for (int r = 0; r < 4; ++r) {
    INFO(all);
    CHECK(all.find("rank " + std::to_string(r) +
                   " all_reduce(sum of rank+1) = 10 (expected 10)") !=
          std::string::npos);
  }
}
#endif

}  // namespace
}  // namespace ddprun::multinode
