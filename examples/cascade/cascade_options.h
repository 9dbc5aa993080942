#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/cascade/cascade_config.h"
#include "examples/cascade/cascade_model.h"
#include "examples/frame/trainer_cli.h"

namespace ddprun::examples {

// cascade_trainer's own options (defaults are what --help shows: CPU-sized,
// so the default synthetic run takes about a minute on 2 ranks of a small
// CPU box; the guide's GPU sizes go in its config file).
struct CascadeOptions {
  std::string dataset_path;  // data.dataset_path
  double val_fraction = 0.2;
  XrayOptions xray;
  StageDefaults stage_defaults;
  int64_t batch_size = 4;  // per rank (per GPU), as the guide's batch_size
  // 3e-3 and 3 DDIM steps: measured on the default synthetic run, the
  // sampled reconstruction beats the mean training volume within 24 epochs
  // per stage (1e-3 and 10 steps: still ~10 dB below it after 8).
  double learning_rate = 3e-3;
  double weight_decay = 0.01;  // AdamW, as the guide's scripts
  int64_t num_timesteps = 1000;
  bool v_parameterization = true;
  int64_t sampling_steps = 3;
  bool train_on_sampling_steps = true;
  double clip_grad = 1.0;
  bool gradient_checkpointing = false;
  double conditioning_noise = 0.1;
  bool augmentation = false;
  bool cache_in_memory = false;
  bool flip_drrs_vertical = false;
  std::vector<double> hu_window{-1000, 1000};
};

// The trainer's command line: TrainerCli with the options above, the
// guide's config keys (xray_config.*, stage_configs[], training.*, data.*)
// and its flags (--wandb, --checkpoint_dir, --resume_from, ...), and the
// mixed precision accelerate launch asks for.
class CascadeCli {
 public:
  CascadeCli();

  // TrainerCli::Parse, then the stage list (StageConfigReader::Resolve)
  // and checks. Mixed precision: --amp / --mixed_precision (or the
  // config's training.mixed_precision), else ACCELERATE_MIXED_PRECISION as
  // `accelerate launch --mixed_precision` (ddprun-accelerate) sets it for
  // the workers, as accelerate's Accelerator() reads it, else fp32. Throws
  // worker::ConfigError (exit 2) for bad input.
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: writes --n patients of the last stage's
  // volume_size (views of img_size) and DIR/config.json, a config in the
  // guide's shape for these options with dataset_path DIR; returns true.
  bool MakeSynthetic();

  const CascadeOptions& options() const { return options_; }
  CommonOptions& common() { return cli_.common(); }
  TrainerCli& trainer() { return cli_; }
  const std::vector<StageConfig>& stages() const { return stages_; }
  // "8x8x8 -> 16x16x16".
  std::string StagesText() const;
  // The guide-shaped config of these options.
  nlohmann::ordered_json GuideConfig(const std::string& dataset_path);

 private:
  TrainerCli cli_;
  CascadeOptions options_;
  StageConfigReader stage_reader_;
  std::vector<StageConfig> stages_;
};

}  // namespace ddprun::examples
