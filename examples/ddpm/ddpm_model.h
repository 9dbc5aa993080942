#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/worker.h"
#include "examples/ddpm/ddpm_options.h"
#include "examples/ddpm/ddpm_validation.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"
#include "examples/frame/activation_checkpoint.h"

namespace ddprun::examples {

// ddpm_trainer's model, diffusion, optimizer and loss (the trainer and
// bench/model_step build them here, so both train the same thing).

// The Fast-DDPM schedule of the options (--timesteps of the linear beta
// schedule, --scheduler_type, --prediction).
FastDdpmOptions DdpmDiffusionOptions(const DdpmOptions& opt);

// The conditional UNet3d of --width with `norm` (synchronised over `world`
// for NormKind::kSyncBatch); with --gradient_checkpointing, backward
// recomputes under `recompute_autocast`.
UNet3d MakeDdpmModel(const DdpmOptions& opt, NormKind norm,
                     const worker::World& world = {},
                     const RecomputeAutocast& recompute_autocast = {});

// Adam with --learning_rate and --weight_decay over `params`.
std::unique_ptr<torch::optim::Adam> MakeDdpmOptimizer(
    std::vector<torch::Tensor> params, const DdpmOptions& opt);

// The loss of one micro-batch of [N, 4, S, S, S] volumes on the model's
// device: the target modality noised at a random Fast-DDPM timestep, the
// UNet's prediction from it and the other three (forward inside
// `autocast()`, a callable returning a scope), MSE to the prediction
// target in fp32.
template <typename AutocastFn>
torch::Tensor DdpmLoss(UNet3d& model, const FastDdpm& ddpm,
                       const torch::Tensor& volumes, int64_t target_modality,
                       AutocastFn&& autocast) {
  auto [target, cond] = SplitTarget(volumes, target_modality);
  FastDdpm::Noised noised = ddpm.AddNoise(target);
  torch::Tensor out;
  {
    auto scope = autocast();
    out = model->forward(torch::cat({noised.x_t, cond}, 1), noised.t);
  }
  return torch::mse_loss(out.to(torch::kFloat32), noised.target);
}

}  // namespace ddprun::examples
