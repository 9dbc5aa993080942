#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "examples/frame/trainer_cli.h"

namespace ddprun::examples {

// segmentation_trainer's own options. The defaults are the trainer's (what
// --help shows); bench/model_step builds its step from them too.
struct SegOptions {
  std::string data_path;  // prompts JSONL or the guide's data root
  double val_fraction = 0.2;
  int64_t image_size = 64;
  int64_t width = 8;
  int64_t batch_size = 8;  // per rank (per GPU)
  double learning_rate = 1e-3;
  bool no_lr_scaling = false;
  double dice_weight = 1.0;
  int64_t prompt_length = 12;
};

// The trainer's command line: TrainerCli (output runs/segmentation, 8
// epochs, --n 192) with the options above and the guide's
// train_prs_med.py names (--data_root, --grad_accum_steps, --dist_url).
class SegmentationCli {
 public:
  SegmentationCli();

  // TrainerCli::Parse, then checks (--image_size a multiple of 8): 0 after
  // --help, nullopt to continue; throws worker::ConfigError (exit 2).
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: writes the synthetic images (prompts.jsonl
  // and the guide's layout, which it names) and returns true (the caller
  // exits 0); false otherwise. Then requires --data_path.
  bool MakeSynthetic();

  const SegOptions& options() const { return options_; }
  CommonOptions& common() { return cli_.common(); }
  TrainerCli& trainer() { return cli_; }

 private:
  TrainerCli cli_;
  SegOptions options_;
};

}  // namespace ddprun::examples
