#include "examples/survival/survival_model.h"

#include <utility>

namespace ddprun::examples {

ResNet3d MakeSurvivalModel(const SurvivalOptions& opt,
                           RecomputeScope recompute_scope) {
  ResNet3dOptions model_options;
  model_options.depth = opt.resnet;
  model_options.width = opt.width;
  model_options.gradient_checkpointing = opt.gradient_checkpointing;
  model_options.recompute_scope = std::move(recompute_scope);
  return ResNet3d(model_options);
}

std::unique_ptr<torch::optim::Adam> MakeSurvivalOptimizer(
    std::vector<torch::Tensor> params, const SurvivalOptions& opt) {
  return std::make_unique<torch::optim::Adam>(
      std::move(params), torch::optim::AdamOptions(opt.learning_rate)
                             .weight_decay(opt.weight_decay));
}

}  // namespace ddprun::examples
