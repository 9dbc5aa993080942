#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "examples/ddpm/ddpm_data.h"
#include "examples/ddpm/ddpm_options.h"
#include "examples/ddpm/ddpm_validation.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"
#include "examples/frame/norm_layer.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {

// The run's two lines in rank 0's log: cases, stages, the effective batch,
// timesteps, prediction, norm, precision; then the sampling schedule.
std::vector<std::string> DescribeDdpmRun(const DdpmOptions& opt,
                                         const FastDdpm& ddpm, NormKind norm,
                                         size_t train_cases, size_t val_cases,
                                         const std::vector<int64_t>& stages,
                                         int64_t accumulation, int world_size,
                                         const std::string& precision);

// ddpm_trainer's progressive stages: per stage (a cubic volume size), the
// loop over the training cases at that size (--epochs epochs, resumable),
// the training step (DdpmLoss per micro-batch) and the validation (every
// validation case sampled on the Fast-DDPM schedule and scored; the main
// rank writes samples to <output_dir>/samples and emits val/samples).
// Everything given must outlive the runner; Run() on the training thread.
class DdpmStages {
 public:
  // Creates <output_dir>/samples on the main rank. `stages`: the volume
  // sizes run (--stages, or its first under --debug).
  DdpmStages(TrainerSession& session, const DdpmOptions& opt, NormKind norm,
             UNet3d model, const FastDdpm& ddpm,
             const std::vector<BratsCase>& cases, std::vector<int64_t> train,
             std::vector<int64_t> val, std::vector<int64_t> stages);

  // Trains stage `stage` (0-based) to its last epoch; returns at once when
  // the session is past it (done before a resume).
  void Run(size_t stage);

 private:
  StatusOr<torch::Tensor> LoadCase(int64_t item, int64_t size) const;
  double Step(std::vector<torch::Tensor>& micro);
  nlohmann::json ValidateEpoch(size_t stage, int64_t epoch);

  TrainerSession& session_;
  const DdpmOptions& opt_;
  const NormKind norm_;
  UNet3d model_;
  const FastDdpm& ddpm_;
  const std::vector<BratsCase>& cases_;
  const std::vector<int64_t> train_, val_, stages_;
  const std::string samples_dir_;
  const int64_t effective_batch_;
};

}  // namespace ddprun::examples
