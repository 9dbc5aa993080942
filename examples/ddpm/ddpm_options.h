#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/ddpm/fast_ddpm.h"
#include "examples/frame/norm_layer.h"
#include "examples/frame/trainer_cli.h"

namespace ddprun::examples {

// ddpm_trainer's own options. The defaults are the trainer's (what --help
// shows); bench/model_step builds its step from them too.
struct DdpmOptions {
  std::string data_root;  // BraTS case folders
  std::string csv_path;   // or a case list
  double val_fraction = 0.2;
  // CPU-sized defaults: a default run on the synthetic data takes ~40 s of
  // CPU with one thread (16,24 with 24^3 data took 90 s under ddprun).
  std::vector<int64_t> stages{12, 16};
  int64_t target_modality = 3;
  int64_t width = 8;
  std::string norm = "group";
  bool sync_batchnorm = false;
  int64_t batch_size = 1;  // per GPU
  int64_t timesteps = 10;
  int64_t num_diffusion_timesteps = 1000;
  double beta_start = 1e-4;
  double beta_end = 0.02;
  std::string scheduler_type = "uniform";
  // x0: see examples/README.md, ddpm, for why it is the default.
  std::string prediction = "x0";
  bool v_parameterization = false;
  double learning_rate = 2e-3;
  double weight_decay = 0;
  double clip_grad = 1.0;
  bool gradient_checkpointing = false;
  int64_t synthetic_size = 16;
  std::string synthetic_layout = "brats";
  std::string exp = "runs";
  std::string doc = "ddpm";
};

// The common options' defaults of ddpm_trainer: output runs/ddpm, 3 epochs
// per stage, --n 40, 4 gradient accumulation steps.
TrainerDefaults DdpmTrainerDefaults();

// The trainer's command line: TrainerCli with the options above and the
// guide's names (fast-ddpm-3d-brats.md: --num_timesteps, --resume_path,
// --gpu, --port, ...).
class DdpmCli {
 public:
  DdpmCli();

  // TrainerCli::Parse, then checks: --stages even and >= 4,
  // --v_parameterization agreeing with --prediction (it sets v), the norm
  // (ParseNormKind; a config's sync_batchnorm with group norm is dropped
  // with a note). 0 after --help, nullopt to continue; throws
  // worker::ConfigError (exit 2) for bad input.
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: writes the synthetic cases and returns true
  // (the caller exits 0). Otherwise requires one of --data_root and
  // --csv_path and applies --exp/--doc to the output dir; false.
  bool MakeSynthetic();

  const DdpmOptions& options() const { return options_; }
  NormKind norm() const { return norm_; }
  // The note of a dropped config sync_batchnorm; empty if none.
  const std::string& sync_note() const { return sync_note_; }
  CommonOptions& common() { return cli_.common(); }
  TrainerCli& trainer() { return cli_; }

 private:
  TrainerCli cli_;
  DdpmOptions options_;
  NormKind norm_ = NormKind::kGroup;
  std::string sync_note_;
};

}  // namespace ddprun::examples
