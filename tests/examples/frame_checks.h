// Checks of the trainer frame (examples/frame/trainer_session.h) that every
// trainer must pass, run as a user would: re-running a finished run, resuming
// from the final and the best checkpoint, the guides' flags and config
// sections, unknown flags, --local_rank. Included by each trainer's process
// test with that trainer's short command.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {

struct FrameCase {
  std::string tag;      // unique per trainer (FreshDir names)
  std::string command;  // the trainer, its data and a small model; no
                        // --output_dir or --epochs
  std::string best_file = "best.pt";
};

// Name -> (size, modification time in ns) of every file in `dir`.
inline std::map<std::string, std::pair<long long, long long>> Snapshot(
    const std::string& dir) {
  std::map<std::string, std::pair<long long, long long>> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0) continue;
    files[e.path().filename()] = {
        static_cast<long long>(st.st_size),
        st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
  }
  return files;
}

// 2 epochs, then: the same command again is a no-op that exits 0 and
// touches nothing; --resume_from the final checkpoint with the same
// --epochs is the same no-op in a fresh dir; --resume_from the best
// checkpoint with --epochs 3 trains the third epoch; the first dir with
// --epochs 3 trains on.
inline void CheckRerunAndResume(const FrameCase& c) {
  const std::string out = FreshDir(c.tag + "_rerun");
  auto run = [&](const std::string& dir, const std::string& flags) {
    return RunCommand(c.command + " --output_dir " + dir + " " + flags, 240);
  };
  CommandResult first = run(out, "--epochs 2 --checkpoint_every 3");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(ReadMetrics(out).size() == 2);
  const std::string ckpts = out + "/checkpoints";
  const std::string best = ckpts + "/" + c.best_file;
  REQUIRE(std::filesystem::exists(best));
  const long long final_step = NewestCheckpointStep(ckpts);
  REQUIRE(final_step > 0);
  char name[64];
  std::snprintf(name, sizeof(name), "/ckpt-%012lld.pt", final_step);
  const std::string final_ckpt = ckpts + name;
  const auto before = Snapshot(ckpts);

  CommandResult again = run(out, "--epochs 2 --checkpoint_every 3");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("run complete: the checkpoint (" + ckpts +
                          ") finished epoch 2 of 2") != std::string::npos);
  CHECK(again.output.find("done: step " + std::to_string(final_step)) !=
        std::string::npos);
  CHECK(Snapshot(ckpts) == before);     // nothing rewritten or pruned
  CHECK(ReadMetrics(out).size() == 2);  // no metrics line

  const std::string from_final = FreshDir(c.tag + "_from_final");
  CommandResult final_run =
      run(from_final, "--epochs 2 --resume_from " + final_ckpt);
  INFO(final_run.output);
  CHECK(final_run.exit_code == 0);
  CHECK(final_run.output.find("run complete: the checkpoint (" + final_ckpt +
                              ")") != std::string::npos);
  CHECK(ReadMetrics(from_final).empty());
  CHECK(NewestCheckpointStep(from_final + "/checkpoints") == -1);

  const std::string from_best = FreshDir(c.tag + "_from_best");
  CommandResult best_run = run(from_best, "--epochs 3 --resume_from " + best);
  INFO(best_run.output);
  CHECK(best_run.exit_code == 0);
  CHECK(best_run.output.find("resumed from " + best + " at step ") !=
        std::string::npos);
  auto resumed = ReadMetrics(from_best);
  REQUIRE(!resumed.empty());
  CHECK(resumed.back()["epoch"] == 3);
  CHECK(std::filesystem::exists(from_best + "/checkpoints/" + c.best_file));

  CommandResult more = run(out, "--epochs 3 --checkpoint_every 3");
  INFO(more.output);
  CHECK(more.exit_code == 0);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 3);
  CHECK(metrics.back()["epoch"] == 3);
  CHECK(metrics.back()["step"].get<long long>() > final_step);

  // A file that is not one of our checkpoints is a usage error.
  WriteText(from_best + "/stage2_best.pt", "written by torch.save");
  CommandResult foreign =
      run(FreshDir(c.tag + "_foreign"),
          "--epochs 1 --resume_from " + from_best + "/stage2_best.pt");
  CHECK(foreign.exit_code == 2);
  CHECK(foreign.output.find("is not a complete checkpoint of these trainers") !=
        std::string::npos);
}

// The guides' command-line flags and a sectioned config file.
inline void CheckGuideFlags(const FrameCase& c) {
  const std::string out = FreshDir(c.tag + "_guide");
  CommandResult r = RunCommand(
      c.command + " --log_dir " + out +
          " --debug --num_epochs 1 --use_wandb --wandb_project p "
          "--multi_gpu --distributed --use_ddp --compile --pin_memory "
          "--gpus 0,1 --world_size 4 --num_gpus 4 --use_deepspeed "
          "--deepspeed ds.json --local-rank=0 --mixed-precision no",
      120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(ReadMetrics(out).size() == 1);  // --log_dir is the output dir
  for (const char* flag :
       {"--use_wandb: ", "--wandb_project p: ", "--multi_gpu: ",
        "--distributed: ", "--use_ddp: ", "--compile: ", "--pin_memory: ",
        "--gpus 0,1: ", "--world_size 4: ", "--num_gpus 4: ",
        "--use_deepspeed: ", "--deepspeed ds.json: "}) {
    INFO(flag);
    CHECK(LinesWith(r.output, std::string("note: ") + flag).size() == 1);
  }

  const std::string yaml = out + "/guide.yaml";
  WriteText(yaml,
            "training:\n  num_epochs: 1\n  gradient_accumulation_steps: 2\n"
            "  multi_gpu: true\n  distributed: false\n"
            "deepspeed:\n  enabled: true\n");
  CommandResult config = RunCommand(
      c.command + " --output_dir " + out + "/cfg --debug --config " + yaml,
      120);
  INFO(config.output);
  CHECK(config.exit_code == 0);
  CHECK(config.output.find("note: " + yaml + ":4: training.multi_gpu: ") !=
        std::string::npos);
  CHECK(config.output.find("note: " + yaml + ":7: deepspeed.enabled: ") !=
        std::string::npos);
  CHECK(ReadMetrics(out + "/cfg").size() == 1);

  WriteText(yaml, "training:\n  num_epochs: 1\n  batch_sise: 2\n");
  CommandResult typo = RunCommand(c.command + " --debug --config " + yaml, 60);
  CHECK(typo.exit_code == 2);
  CHECK(typo.output.find(yaml + ":3: unknown key 'training.batch_sise' (did "
                                "you mean 'batch_size'?)") !=
        std::string::npos);

  CommandResult unknown = RunCommand(c.command + " --debug --lrr 0.1", 60);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("unknown option --lrr (did you mean --lr?)") !=
        std::string::npos);

  CommandResult rank =
      RunCommand("LOCAL_RANK=0 " + c.command + " --debug --local_rank 1", 60);
  CHECK(rank.exit_code == 2);
  CHECK(rank.output.find("--local_rank 1 disagrees with LOCAL_RANK=0") !=
        std::string::npos);
}

}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {

// One trainer's row of the shared "kill -9 of rank 1, resume" contract.
struct FaultCase {
  std::string tag;  // FreshDir names: <tag>_clean, <tag>_fault
  // The trainer's command line writing to `output_dir` (2 ranks under
  // ddprun are added in front).
  std::function<std::string(const std::string& output_dir)> command;
  int timeout_s = 300;
  // The step whose checkpoint must exist before the kill, from the clean
  // run's metrics.
  std::function<long long(const std::vector<nlohmann::json>& clean)> min_step;
  // Fields the resumed run's last metrics line must have.
  std::map<std::string, nlohmann::json> final_fields;
  // Fields of the last metrics line that must equal the clean run's to 1e-4.
  std::vector<std::string> same_as_clean;
};

struct FaultOutcome {
  CommandResult clean;                      // the uninterrupted run
  std::vector<nlohmann::json> clean_metrics;
  FaultRun fault;                           // the run whose rank 1 was killed
  std::vector<nlohmann::json> metrics;
};

// A clean 2-rank run, then the same run under --max_restarts=1 whose rank 1
// is kill -9'd once a checkpoint of min_step exists: the group restarts,
// resumes from a checkpoint at least as new as the one seen before the
// kill and ends where the clean run ends (same_as_clean to 1e-4: on the CPU
// with one intra-op thread the resumed run repeats the clean run's numbers,
// while a resume that lost any state (optimizer, sampler position, RNG)
// would not). Returns both runs for trainer-specific checks.
inline FaultOutcome CheckKillRank1AndResume(const FaultCase& c) {
  FaultOutcome o;
  const std::string clean = FreshDir(c.tag + "_clean");
  o.clean = RunCommand(Launch("") + c.command(clean), c.timeout_s);
  INFO(o.clean.output);
  REQUIRE(o.clean.exit_code == 0);
  o.clean_metrics = ReadMetrics(clean);
  REQUIRE(!o.clean_metrics.empty());
  const nlohmann::json clean_last = o.clean_metrics.back();
  const long long min_step = c.min_step(o.clean_metrics);

  const std::string out = FreshDir(c.tag + "_fault");
  o.fault = RunAndKillRank1(Launch("--max_restarts=1") + c.command(out), out,
                            min_step, c.timeout_s);
  INFO(o.fault.result.output);
  REQUIRE(o.fault.killed);
  REQUIRE(o.fault.result.exit_code == 0);
  CHECK(o.fault.resumed_step >= o.fault.saved_step);
  o.metrics = ReadMetrics(out);
  REQUIRE(!o.metrics.empty());
  const nlohmann::json& last = o.metrics.back();
  INFO("resumed " << last.dump() << "\nclean " << clean_last.dump());
  for (const auto& [key, value] : c.final_fields) {
    INFO(key);
    CHECK(last[key] == value);
  }
  for (const std::string& key : c.same_as_clean) {
    INFO(key);
    CHECK(last[key].get<double>() ==
          Approx(clean_last[key].get<double>()).margin(1e-4));
  }
  return o;
}

// A fixed min_step for FaultCase.
inline std::function<long long(const std::vector<nlohmann::json>&)> AtStep(
    long long step) {
  return [step](const std::vector<nlohmann::json>&) { return step; };
}

}  // namespace ddprun::examples::testing
#endif  // DDPRUN_LAUNCHER_BIN
