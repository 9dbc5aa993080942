#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "examples/frame/activation_checkpoint.h"
#include "examples/survival/resnet3d.h"
#include "examples/survival/survival_options.h"

namespace ddprun::examples {

// survival_trainer's model and optimizer, from its options (the trainer
// and bench/model_step build them here, so both train the same thing).

// ResNet3d of --resnet and --width with one risk output; with
// --gradient_checkpointing, backward recomputes inside `recompute_scope`
// (the trainer's autocast).
ResNet3d MakeSurvivalModel(const SurvivalOptions& opt,
                           RecomputeScope recompute_scope = {});

// Adam with --learning_rate and --weight_decay over `params` (build it
// after the model is on its device).
std::unique_ptr<torch::optim::Adam> MakeSurvivalOptimizer(
    std::vector<torch::Tensor> params, const SurvivalOptions& opt);

}  // namespace ddprun::examples
