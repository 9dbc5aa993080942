#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/frame/trainer_cli.h"

namespace ddprun::examples {

// survival_trainer's own options. The defaults are the trainer's (what
// --help shows); bench/model_step builds its step from them too.
struct SurvivalOptions {
  std::string csv_path;
  double val_fraction = 0.25;
  std::string resnet = "resnet10";
  int64_t width = 8;
  std::vector<int64_t> image_size{32, 32, 32};
  int64_t batch_size = 8;  // total across ranks
  double learning_rate = 2e-3;
  double weight_decay = 1e-4;
  bool use_smart_cache = false;
  double cache_rate = 0.5;
  double replace_rate = 0.25;
  int64_t synthetic_size = 32;
  bool gradient_checkpointing = false;
  double clip_grad = 0;
  // The guide's split (finetune_survival_distributed.py): a fold column.
  std::string fold_column = "Fold_1";
  std::string train_fold = "train";
  std::string val_fold = "val";
};

// The trainer's command line: TrainerCli (output runs/survival, 4 epochs,
// --n 160) with the options above (the guide's --max_grad_norm and
// --activation_checkpointing through TrainerCli) and its --output.
class SurvivalCli {
 public:
  SurvivalCli();

  // TrainerCli::Parse: 0 after --help, nullopt to continue; throws
  // worker::ConfigError (exit 2) for bad input.
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: writes the synthetic subjects and returns
  // true (the caller exits 0); false otherwise.
  bool MakeSynthetic();

  // Requires --csv_path and resolves a data root to its dataset.csv
  // (ResolveSurvivalCsv); throws worker::ConfigError for a bad path.
  void ResolveData();

  const SurvivalOptions& options() const { return options_; }
  CommonOptions& common() { return cli_.common(); }
  TrainerCli& trainer() { return cli_; }

 private:
  TrainerCli cli_;
  SurvivalOptions options_;
};

}  // namespace ddprun::examples
