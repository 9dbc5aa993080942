#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/frame/trainer_cli.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {

// What mimic-cxr-vqa.md's names and its hardware table decide.
struct VqaGuideSettings {
  int64_t batch_size = 16;                 // per rank, per micro-batch
  int zero = 0;                            // --zero
  std::string offload_optimizer = "none";  // --offload_optimizer none|cpu
  bool auto_optimize = false;
  int64_t target_batch = 32;
};

// Registers the guide's names on `cli` (after the trainer's own options):
// aliases (batch_size_per_gpu, --no_auto_optimize, the data-path names of
// its scripts and config, the keys of its DeepSpeed JSON and of its YAML's
// deepspeed: section), --deepspeed_config FILE (DeepSpeed's JSON as a second
// config file: keys without a counterpart are noted in one line), and the
// DeepSpeed switches and memory keys answered with a line saying what
// happens here (--use_deepspeed, --deepspeed, deepspeed.enabled,
// gradient_checkpointing, activation_checkpointing, train_batch_size,
// zero_optimization.offload_optimizer.pin_memory).
void AddVqaGuideNames(TrainerCli& cli);

// DeepSpeed's and the HF Trainer's `--deepspeed ds_config.json` (also
// `--deepspeed=FILE`): the command line with such a value, an existing
// file, split into `--deepspeed --deepspeed_config FILE`, so that the JSON
// is read as by --deepspeed_config. A value that is no file stays the
// foreign flag's value (its note line names it, as for every trainer).
// Other arguments are unchanged; argv[0] is kept.
std::vector<std::string> SplitDeepSpeedJson(int argc, char** argv);

// After TrainerSession: applies, to the settings no flag or config set,
//  1. --auto_optimize: batch, accumulation, threads and precision from the
//     guide's hardware table (worker::RecommendSettings); with 2+ GPUs the
//     guide's choice of DeepSpeed ZeRO-2 (2 below);
//  2. DeepSpeed (--use_deepspeed, --deepspeed, deepspeed.enabled: true, or
//     auto_optimize on 2+ GPUs): the guide's DeepSpeed config, as ZeRO-2
//     (--zero 2) and, on a GPU, optimizer offload to the CPU and fp16 with
//     loss scaling;
// and logs one line each saying what it set and what it kept. Then checks
// the combination: ConfigError for --offload_optimizer cpu without
// --zero 1|2.
void ApplyVqaGuideSettings(TrainerSession& session, const TrainerCli& cli,
                           VqaGuideSettings* settings);

}  // namespace ddprun::examples
