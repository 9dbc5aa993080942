#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "examples/formats/vocabulary.h"
#include "examples/frame/trainer_session.h"
#include "examples/segmentation/prompt_unet.h"
#include "examples/segmentation/segmentation_batches.h"
#include "examples/segmentation/segmentation_model.h"

namespace ddprun::examples {

// segmentation_trainer's training step and validation.

// The loss of one micro-batch: the model's forward inside `autocast()` (a
// callable returning a scope, e.g. TrainerSession::Autocast), DiceBceLoss
// with `dice_weight` in fp32 outside it. `b` must be on the model's device.
template <typename AutocastFn>
torch::Tensor SegmentationLoss(PromptUNet& model, const SegBatch& b,
                               double dice_weight, AutocastFn&& autocast) {
  torch::Tensor logits;
  {
    auto scope = autocast();
    logits = model->forward(b.images, b.tokens);
  }
  return DiceBceLoss(logits, b.masks, dice_weight);
}

// One optimizer step over `micro` (TrainerSession::Step; moves each
// micro-batch to the device). Returns this rank's loss.
double SegmentationTrainStep(TrainerSession& session, PromptUNet& model,
                             const SegOptions& opt,
                             std::vector<SegBatch>& micro);

// Validation of epoch `epoch` over `val` (each rank its share, batches of
// --batch_size): loss weighted by samples and Dice sums are reduced over
// ranks, so the numbers cover the set exactly once. Returns val_loss,
// val_dice and val_images; the main rank emits the val/mask_overlay
// picture of its first validation images.
nlohmann::json ValidateSegmentation(TrainerSession& session, PromptUNet& model,
                                    const SegOptions& opt,
                                    const std::vector<SegRecord>& records,
                                    const Vocabulary& vocab,
                                    const std::vector<int64_t>& val,
                                    int64_t epoch);

}  // namespace ddprun::examples
