#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "examples/segmentation/prompt_unet.h"
#include "examples/segmentation/segmentation_options.h"

namespace ddprun::examples {

// segmentation_trainer's model, optimizer and loss (the trainer and
// bench/model_step build them here, so both train the same thing).

// PromptUNet of --width over a prompt vocabulary of `vocab_size` tokens.
PromptUNet MakeSegmentationModel(const SegOptions& opt, int64_t vocab_size);

// Adam at `lr` (the trainer's --learning_rate after world-size scaling).
std::unique_ptr<torch::optim::Adam> MakeSegmentationOptimizer(
    std::vector<torch::Tensor> params, double lr);

// Soft Dice loss (1 - Dice of probabilities, per image then averaged)
// times `dice_weight`, plus BCE on logits; computed in fp32.
torch::Tensor DiceBceLoss(const torch::Tensor& logits,
                          const torch::Tensor& target, double dice_weight);

}  // namespace ddprun::examples
