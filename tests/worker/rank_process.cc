#include "tests/worker/rank_process.h"

#include <algorithm>
#include <memory>

namespace ddprun::worker::testing {

namespace {
ddprun::testing::ProcessOptions RankOptions(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env) {
  ddprun::testing::ProcessOptions o;
  o.argv = argv;
  o.env = env;
  o.name = "rank";
  o.merge_stderr = true;
  o.own_process_group = false;
  return o;
}
}  // namespace

RankProcess::RankProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env)
    : process_(RankOptions(argv, env)) {}

std::map<std::string, std::string> RankEnv(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"OMP_NUM_THREADS", "1"}};
}

std::vector<RankResult> RunRanks(
    const std::vector<std::string>& argv, int world,
    const std::map<std::string, std::string>& extra_env,
    std::chrono::milliseconds timeout, int port) {
  if (port == 0) port = FreeLoopbackPort();
  std::vector<std::unique_ptr<RankProcess>> procs;
  for (int r = 0; r < world; ++r) {
    auto env = RankEnv(r, world, port);
    for (auto& [k, v] : extra_env) env[k] = v;
    procs.push_back(std::make_unique<RankProcess>(argv, env));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<RankResult> out;
  for (auto& p : procs) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (!p->Wait(std::max(left, std::chrono::milliseconds(0)))) {
      p->Kill();
      p->Wait(std::chrono::seconds(5));
    }
    out.push_back({p->exit_code(), p->Output()});
  }
  return out;
}

std::string BinPath(const std::string& name) {
  return std::string(DDPRUN_BIN_DIR) + "/" + name;
}

}  // namespace ddprun::worker::testing
