#include "examples/ddpm/ddpm_model.h"

#include <utility>

namespace ddprun::examples {

FastDdpmOptions DdpmDiffusionOptions(const DdpmOptions& opt) {
  FastDdpmOptions ddpm_options;
  ddpm_options.steps = opt.timesteps;
  ddpm_options.total_steps = opt.num_diffusion_timesteps;
  ddpm_options.beta_start = opt.beta_start;
  ddpm_options.beta_end = opt.beta_end;
  ddpm_options.schedule = ParseTimestepSchedule(opt.scheduler_type);
  ddpm_options.prediction = ParsePrediction(opt.prediction);
  return ddpm_options;
}

UNet3d MakeDdpmModel(const DdpmOptions& opt, NormKind norm,
                     const worker::World& world,
                     const RecomputeAutocast& recompute_autocast) {
  UNet3dOptions model_options;
  model_options.width = opt.width;
  model_options.norm = norm;
  model_options.world = world;
  model_options.gradient_checkpointing = opt.gradient_checkpointing;
  model_options.recompute_autocast = recompute_autocast;
  return UNet3d(model_options);
}

std::unique_ptr<torch::optim::Adam> MakeDdpmOptimizer(
    std::vector<torch::Tensor> params, const DdpmOptions& opt) {
  return std::make_unique<torch::optim::Adam>(
      std::move(params), torch::optim::AdamOptions(opt.learning_rate)
                             .weight_decay(opt.weight_decay));
}

}  // namespace ddprun::examples
