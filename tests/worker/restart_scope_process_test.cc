// Restart scope "failed" (docs/restart_scope.md) on the worker runtime's
// pieces alone: 4 ranks of rank_helper's tiny model (heal mode) under the
// agent stand-in (restart_agent.cc), one of them SIGKILLed at a chosen step
// and phase, replaced alone; the other ranks keep their processes, the job
// finishes and every rank's final parameters and buffers equal those of
// the uninterrupted run bit for bit. And the bounds: a second failure while
// healing, a sharded optimizer: every worker exits non-zero, none hangs.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "tests/worker/process_checks.h"
#include "tests/worker/restart_run.h"

namespace ddprun::worker::testing {
namespace {

using ddprun::testing::RestartRun;

constexpr int kRanks = 4;
constexpr int kSteps = 10;

std::string Agent() { return wt::BinPath("worker_restart_agent"); }

// How many of the values differ bit for bit (all of them when the sizes
// differ).
size_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return n;
}

// The stand-in's `args` (its flags and --env) around `ranks` ranks of
// rank_helper heal for `steps` steps, writing to `dir`.
RestartRun HealRun(const std::string& dir, const std::string& args,
                   int ranks = kRanks, int steps = kSteps) {
  return ddprun::testing::RunRestartAgent(
      Agent(), dir,
      "--nproc " + std::to_string(ranks) + " --timeout 200 " + args + " -- " +
          Helper() + " heal " + dir + "/params " + std::to_string(steps),
      260);
}

// The uninterrupted run's parameters per rank (once per test binary and
// transport).
const std::vector<std::vector<float>>& Clean(const std::string& env) {
  static std::map<std::string, std::vector<std::vector<float>>> cache;
  auto it = cache.find(env);
  if (it != cache.end()) return it->second;
  const std::string dir = TempDir();
  RestartRun run = HealRun(dir, env);
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 0);
  std::vector<std::vector<float>> params;
  for (int r = 0; r < kRanks; ++r) {
    params.push_back(ReadFloats(dir + "/params." + std::to_string(r)));
    REQUIRE(!params.back().empty());
    // Every rank holds the same model.
    REQUIRE(Differing(params.back(), params.front()) == 0);
  }
  return cache.emplace(env, std::move(params)).first->second;
}

// A run where HEAL_DIE kills `rank`: the job finishes, the other ranks kept
// their processes, the killed rank was replaced once, and every rank ends
// with the uninterrupted run's parameters, bit for bit.
void CheckHealedRun(int rank, const std::string& die,
                    const std::string& env = "") {
  const auto& clean = Clean(env);
  const std::string dir = TempDir();
  RestartRun run = HealRun(dir,
                           "--max_replacements 1 --heal_timeout 60 --env "
                           "DDPRUN_HEAL_TIMEOUT_S=60 --env HEAL_DIE=" +
                               die + " " + env);
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 0);
  REQUIRE(run.heal_seconds.size() == 1);
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    REQUIRE(run.final_exit.at(r) == 0);
    if (r == rank) {
      CHECK(run.final_generation.at(r) == 1);
      CHECK(run.final_pid.at(r) != run.first_pid.at(r));
    } else {
      CHECK(run.final_pid.at(r) == run.first_pid.at(r));
    }
    CHECK(Differing(ReadFloats(dir + "/params." + std::to_string(r)),
                    clean[r]) == 0);
  }
  CHECK(run.result.output.find("generation 1: {\"replaced\":[" +
                               std::to_string(rank) + "]") !=
        std::string::npos);
}

TEST_CASE(
    "restart scope failed: a rank killed at a step's start is replaced "
    "alone and the job ends as the uninterrupted one",
    "[worker][process][restart_scope]") {
  CheckHealedRun(2, "2:4:start");
}

TEST_CASE(
    "restart scope failed: a rank killed during the gradient all-reduce "
    "(shared memory and Gloo)",
    "[worker][process][restart_scope]") {
  SECTION("shared memory") { CheckHealedRun(1, "1:6:allreduce"); }
  SECTION("Gloo") {
    CheckHealedRun(3, "3:5:allreduce", "--env DDPRUN_SHM_ALLREDUCE=0");
  }
}

TEST_CASE(
    "restart scope failed: a rank killed after the step's collectives, "
    "before the agreement or after its commit",
    "[worker][process][restart_scope]") {
  // The survivors wait for a decision that nobody writes until the agent's
  // generation moves; after a commit they applied the step the dead rank
  // never applied, and the replacement heals past it.
  SECTION("before the agreement") { CheckHealedRun(3, "3:3:agree"); }
  SECTION("after the commit") { CheckHealedRun(2, "2:8:apply"); }
}

TEST_CASE(
    "restart scope failed: the rank every other heals from (rank 0) "
    "is killed, and rank 1 is the source",
    "[worker][process][restart_scope]") {
  CheckHealedRun(0, "0:5:allreduce");
}

TEST_CASE(
    "restart scope failed: a second failure while healing ends every "
    "worker with an error within the heal timeout, none hangs",
    "[worker][process][restart_scope]") {
  const std::string dir = TempDir();
  const auto start = std::chrono::steady_clock::now();
  RestartRun run = HealRun(
      dir,
      "--heal_timeout 30 --max_replacements 1 --also_kill 2 --env "
      "DDPRUN_HEAL_TIMEOUT_S=10 --env HEAL_DIE=1:4:start --env HEAL_STEP_MS=20",
      kRanks, 200);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 1);  // 2 would be the stand-in's timeout
  for (int r : {0, 1, 3}) {
    CAPTURE(r);
    CHECK(run.final_exit.at(r) == kExitCollective);
  }
  CHECK(run.Logs().find("within the heal timeout (10 s") != std::string::npos);
  // Start-up (LibTorch, four ranks on a loaded machine), steps, the heal
  // timeout: well under the stand-in's own 200 s.
  CHECK(seconds < 150);
}

TEST_CASE(
    "restart scope failed: a sharded optimizer cannot be healed, "
    "every worker says so and exits non-zero",
    "[worker][process][restart_scope]") {
  const std::string dir = TempDir();
  RestartRun run =
      HealRun(dir,
              "--max_replacements 1 --env DDPRUN_HEAL_TIMEOUT_S=20 "
              "--env HEAL_DIE=1:3:start --env HEAL_SHARDED=1",
              2);
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 1);
  CHECK(run.final_exit.at(0) == kExitCollective);
  CHECK(run.final_exit.at(1) == kExitCollective);
  // The survivor says why; the replacement then waits for it in vain, for
  // the heal timeout.
  CHECK(ddprun::testing::ReadFile(dir + "/rank0.gen0.out")
            .find("cannot heal a sharded optimizer (ZeRO)") !=
        std::string::npos);
}

}  // namespace
}  // namespace ddprun::worker::testing
