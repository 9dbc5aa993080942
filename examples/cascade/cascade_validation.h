#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "examples/cascade/cascade_batches.h"
#include "examples/cascade/cascade_model.h"
#include "examples/cascade/v_diffusion.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {

// What a rank's training steps of one epoch added up (the two parts of
// the loss, per micro-batch).
struct TrainSums {
  double diffusion = 0;
  double physics = 0;
  double count = 0;
};

// Validation of the cascade up to a stage: every validation patient is
// reconstructed from its X-ray views alone (stage 1 samples from noise,
// each later stage from noise conditioned on the previous stage's sample,
// upsampled) and scored against its CT volume, beside the baseline of the
// mean training volume. Calls are collective unless noted.
class CascadeEvaluator {
 public:
  CascadeEvaluator(TrainerSession* session, CascadeModel model,
                   const VDiffusion* diffusion, PatientStore* store,
                   uint64_t seed);

  // The baseline of stage `k`: the mean of the training volumes at its
  // size (each rank loads its share; one all-reduce).
  void ComputeMeanVolume(size_t k, const std::vector<int64_t>& train);

  // Patient `item` reconstructed by stages 1..k+1 from `views` ([1, V, S,
  // S] on the device): [1, 1, D, H, W] of stage k. The starting noise of
  // each stage is seeded by (seed, item, stage), so epochs and resumed runs
  // score the same draws. Local.
  torch::Tensor Reconstruct(const torch::Tensor& views, size_t k, int64_t item);

  // The epoch record of stage `k`: reconstruction PSNR / SSIM (data range
  // 2) and those of the mean volume, the physics loss of the
  // reconstruction and of the truth, the training objective on the
  // validation patients (val_loss = diffusion + physics_weight * physics,
  // at seeded timesteps), and the epoch's training averages from `train`.
  // Rank 0 emits slices of truth and reconstruction, and the views beside
  // the reconstruction's radiographs (session EmitImage).
  nlohmann::json Validate(size_t k, const std::vector<int64_t>& val,
                          const TrainSums& train);

 private:
  // The network output of stage `k` (autocast as in training).
  torch::Tensor Net(size_t k, const torch::Tensor& x_t, const torch::Tensor& t,
                    const torch::Tensor& views, const torch::Tensor& previous);
  void EmitImages(size_t k, const torch::Tensor& truth,
                  const torch::Tensor& reconstruction,
                  const torch::Tensor& views);

  TrainerSession* session_;
  CascadeModel model_;
  const VDiffusion* diffusion_;
  PatientStore* store_;
  uint64_t seed_;
  std::vector<torch::Tensor> mean_volume_;  // per stage, [1, 1, D, H, W]
};

}  // namespace ddprun::examples
