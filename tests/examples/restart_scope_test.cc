// Restart scope "failed" in the trainers (docs/restart_scope.md), through
// TrainerSession: survival and ddpm on 4 ranks under the agent stand-in
// (tests/worker/restart_agent.cc, until ddprun's own agent half), one rank
// SIGKILLed once its step count reaches a kill point, three kill points per
// trainer (rank 0, whose records and checkpoints the others rely on, among
// them), each in a run of its own. Every time the other ranks keep their
// processes, the killed one is replaced alone and heals from a live peer,
// the job finishes, and its metrics.jsonl and final checkpoint equal the
// uninterrupted run's (same flags) bit for bit, timings aside.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"
#include "tests/worker/restart_run.h"

namespace ddprun::examples::testing {
namespace {

using ddprun::testing::RestartRun;

constexpr int kRanks = 4;

RestartRun RunUnderStandIn(const std::string& command, const std::string& out,
                           const std::string& agent_args) {
  // The stand-in's logs go beside the trainer's outputs.
  std::filesystem::create_directories(out + "/agent");
  return ddprun::testing::RunRestartAgent(
      Bin("worker_restart_agent"), out + "/agent",
      "--nproc " + std::to_string(kRanks) +
          " --timeout 600 --heal_timeout 120 --env DDPRUN_HEAL_TIMEOUT_S=120 " +
          agent_args + " -- " + command + " --output_dir " + out,
      660);
}

// The metrics records without what measures time.
std::vector<nlohmann::json> Comparable(std::vector<nlohmann::json> records) {
  for (nlohmann::json& r : records) {
    for (const char* timing : {"time", "samples_per_s", "profile"}) {
      r.erase(timing);
    }
  }
  return records;
}

// LibTorch's optimizer archive names each parameter's state by the
// address of the parameter in the process that saved it
// ("optimizer/state/0x55.../exp_avg", "param_groups/0/params/3 = 0x55...");
// two processes never share them. Each address becomes the parameter's
// place in its group ("group0/param3"), and the lines are sorted again.
std::vector<std::string> WithoutAddresses(std::vector<std::string> lines) {
  const std::string marker = "optimizer/param_groups/param_groups/";
  std::vector<std::pair<std::string, std::string>> names;  // address, name
  for (const std::string& line : lines) {
    const size_t params = line.find("/params/");
    const size_t eq = line.find(" = 0x");
    if (line.rfind(marker, 0) != 0 || params == std::string::npos ||
        eq == std::string::npos || eq < params) {
      continue;
    }
    const std::string group =
        line.substr(marker.size(), params - marker.size());
    const std::string index = line.substr(params + 8, eq - params - 8);
    names.emplace_back(line.substr(eq + 3), "group" + group + "/param" + index);
  }
  for (std::string& line : lines) {
    for (const auto& [address, name] : names) {
      // Whole addresses only: one may be another's prefix.
      size_t at = line.find(address);
      while (at != std::string::npos) {
        const size_t end = at + address.size();
        if (end < line.size() && std::isxdigit(line[end])) {
          at = line.find(address, at + 1);
          continue;
        }
        line.replace(at, address.size(), name);
        at = line.find(address, at + name.size());
      }
    }
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

// The newest periodic or final checkpoint's tensors and scalars, hashed
// (rank_helper ckpt_digest), without the lines a timing changes: the
// samples/s of the epoch records travel among the scalars.
std::vector<std::string> FinalCheckpoint(const std::string& out) {
  const long long step = NewestCheckpointStep(out + "/checkpoints");
  char name[64];
  std::snprintf(name, sizeof(name), "/ckpt-%012lld.pt", step);
  CommandResult r = RunCommand(
      Bin("worker_rank_helper") + " ckpt_digest " + out + "/checkpoints" + name,
      120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> lines;
  for (const std::string& line : LinesWith(r.output, " ")) {
    if (line.find("samples_per_s") != std::string::npos ||
        line.rfind("meta/scalar_values ", 0) == 0) {
      continue;
    }
    lines.push_back(line);
  }
  REQUIRE(lines.size() > 10);
  return WithoutAddresses(std::move(lines));
}

struct Outcome {
  std::vector<nlohmann::json> metrics;
  std::vector<std::string> checkpoint;
};

Outcome Clean(const std::string& tag, const std::string& command) {
  const std::string out = FreshDir(tag + "_clean");
  RestartRun run = RunUnderStandIn(command, out, "");
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 0);
  return {ReadMetrics(out), FinalCheckpoint(out)};
}

// Kills `rank` once its step count reaches `step`; see the file comment.
void CheckKill(const std::string& tag, const std::string& command,
               const Outcome& clean, int rank, int step) {
  CAPTURE(rank, step);
  const std::string out = FreshDir(tag + "_kill" + std::to_string(rank) + "_" +
                                   std::to_string(step));
  RestartRun run = RunUnderStandIn(
      command, out,
      "--kill " + std::to_string(rank) + "@" + std::to_string(step));
  INFO(run.Logs());
  REQUIRE(run.result.exit_code == 0);
  REQUIRE(run.killed == 1);
  REQUIRE(run.heal_seconds.size() == 1);
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    CHECK(run.final_exit.at(r) == 0);
    CHECK((run.final_pid.at(r) == run.first_pid.at(r)) == (r != rank));
  }
  const std::vector<nlohmann::json> metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == clean.metrics.size());
  CHECK(Comparable(metrics) == Comparable(clean.metrics));
  CHECK(FinalCheckpoint(out) == clean.checkpoint);
}

// The uninterrupted run (`epochs` metrics records), then a run per kill
// point (rank, step).
void CheckTrainer(const std::string& tag, const std::string& command,
                  size_t epochs,
                  const std::vector<std::pair<int, int>>& kills) {
  const Outcome clean = Clean(tag, command);
  REQUIRE(clean.metrics.size() == epochs);
  for (const auto& [rank, step] : kills) {
    CheckKill(tag, command, clean, rank, step);
  }
}

TEST_CASE(
    "survival_trainer under restart scope failed: kill -9 of one of 4 "
    "ranks at 3 steps, each healed to the uninterrupted result",
    "[restart_scope][survival]") {
  // 36 training subjects, 9 a rank: 4 steps an epoch (the last
  // micro-batch of 1 merged into the one before), 12 in all, a checkpoint
  // every 4. Rank 0 writes the records and checkpoints (rank 1 is then the
  // source). A kill point must come before the last step: at 12 the job
  // ends first.
  CheckTrainer(
      "survival_heal",
      Bin("survival_trainer") + " --csv_path " +
          SyntheticData("survival", "--n 48 --synthetic_size 16 --seed 3",
                        "survival.csv") +
          " --image_size 16 16 16 --progress_interval 1 "
          "--batch_size 8 --epochs 3 --checkpoint_every 4",
      3, {{2, 3}, {0, 7}, {3, 10}});
}

TEST_CASE(
    "ddpm_trainer under restart scope failed: kill -9 of one of 4 "
    "ranks at 3 steps across its two stages, each healed to the "
    "uninterrupted result",
    "[restart_scope][ddpm]") {
  // 10 training cases: 3 steps a rank an epoch, 2 epochs a stage, 12 steps.
  CheckTrainer("ddpm_heal",
               Bin("ddpm_trainer") + " --csv_path " +
                   SyntheticData("ddpm", "--n 12 --synthetic_size 16 --seed 9",
                                 "cases.csv") +
                   " --stages 8,12 --epochs 2 --gradient_accumulation_steps 1 "
                   "--width 4 --v_parameterization --progress_interval 1 "
                   "--checkpoint_every 3",
               4, {{1, 2}, {0, 6}, {3, 10}});
}

}  // namespace
}  // namespace ddprun::examples::testing
