#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "examples/frame/trainer_session.h"
#include "examples/survival/cox_loss.h"
#include "examples/survival/resnet3d.h"
#include "examples/survival/survival_batches.h"

namespace ddprun::examples {

// survival_trainer's training step and validation.

// The loss of one micro-batch (its own Cox risk set): the model's forward
// inside `autocast()` (a callable returning a scope, e.g.
// TrainerSession::Autocast), the Cox partial likelihood in fp32 outside it.
// `b` must be on the model's device.
template <typename AutocastFn>
torch::Tensor SurvivalLoss(ResNet3d& model, const SurvivalBatch& b,
                           AutocastFn&& autocast) {
  torch::Tensor risk;
  {
    auto scope = autocast();
    risk = model->forward(b.images);
  }
  return CoxPartialLikelihoodLoss(risk, b.time, b.event);
}

// One optimizer step over `micro` (TrainerSession::Step; moves each
// micro-batch to the device). Returns this rank's loss.
double SurvivalTrainStep(TrainerSession& session, ResNet3d& model,
                         std::vector<SurvivalBatch>& micro);

// Validation of epoch `epoch`: every rank predicts its share of `val`
// (batches of `batch_size`), the risks are gathered; returns val_loss (Cox
// over the whole set), val_cindex and validation_subjects; the main rank
// emits the val/risk_groups picture.
nlohmann::json ValidateSurvival(TrainerSession& session, ResNet3d& model,
                                const std::vector<SurvivalRecord>& records,
                                const std::vector<int64_t>& val,
                                const std::vector<int64_t>& image_size,
                                int64_t batch_size, int64_t epoch);

}  // namespace ddprun::examples
