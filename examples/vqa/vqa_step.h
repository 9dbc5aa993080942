#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "ddprun/worker/worker.h"
#include "examples/frame/norm_layer.h"
#include "examples/frame/trainer_session.h"
#include "examples/vqa/vqa_batches.h"
#include "examples/vqa/vqa_model.h"
#include "examples/vqa/vqa_options.h"

namespace ddprun::examples {

// vqa_trainer's model, optimizer, loss, training step and validation (the
// trainer and bench/model_step build the model, optimizer and loss here).

// VqaModel of --width with `norm` (synchronised over `world` for
// NormKind::kSyncBatch) over `vocab_size` question tokens and
// `num_answers` answers.
VqaModel MakeVqaModel(const VqaOptions& opt, int64_t vocab_size,
                      int64_t num_answers, NormKind norm,
                      const worker::World& world = {});

// --zero 0: Adam at --learning_rate; 1 or 2: worker::ShardedAdam over
// `world` (2 also reduces gradients, so no DDP), its shard in host memory
// with --offload_optimizer cpu. Exactly one is set.
struct VqaOptimizer {
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<worker::ShardedAdam> sharded;
};
VqaOptimizer MakeVqaOptimizer(const VqaOptions& opt, const worker::World& world,
                              std::vector<torch::Tensor> params);

// "optimizer state (Adam exp_avg + exp_avg_sq of N parameters): ... per
// rank beside the parameters, ... offloaded to host memory (unsharded:
// ...)": what --zero and --offload_optimizer keep where.
std::string DescribeOptimizerState(torch::nn::Module& model,
                                   const worker::ShardedAdam* sharded);

// The loss of one batch on the model's device: answer cross-entropy
// (unseen answers ignored) + label_weight x CheXpert BCE summed over the
// known labels / their count, in fp32; the forward runs inside
// `autocast()` (a callable returning a scope). The logits are left in
// `answer_logits` and `label_logits`.
template <typename AutocastFn>
torch::Tensor VqaLoss(VqaModel& model, const VqaBatch& b, double label_weight,
                      AutocastFn&& autocast, torch::Tensor* answer_logits,
                      torch::Tensor* label_logits) {
  {
    auto scope = autocast();
    std::tie(*answer_logits, *label_logits) =
        model->forward(b.images, b.tokens);
  }
  torch::Tensor ce = torch::nn::functional::cross_entropy(
      answer_logits->to(torch::kFloat32), b.answers,
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
  torch::Tensor bce = torch::binary_cross_entropy_with_logits(
      label_logits->to(torch::kFloat32), b.labels, b.mask, {},
      at::Reduction::Sum);
  return ce + label_weight * bce / b.mask.sum().clamp_min(1.0);
}

// One optimizer step over `micro` (TrainerSession::Step; moves each
// micro-batch to the device). Returns this rank's loss.
double VqaTrainStep(TrainerSession& session, VqaModel& model,
                    const VqaOptions& opt, std::vector<VqaBatch>& micro);

// Validation of epoch `epoch`: every rank answers its share of the
// validation set (batches loaded by `load`), rows are gathered; returns
// val_answer_accuracy, val_mean_auroc, val_questions, label_auroc (and
// norm_stats_rank_spread without group norm, after aligning the ranks'
// batch-norm buffers); the main rank emits the val/label_auroc chart.
nlohmann::json ValidateVqa(
    TrainerSession& session, VqaModel& model, const VqaOptions& opt,
    NormKind norm, const std::vector<int64_t>& val,
    const std::function<StatusOr<VqaBatch>(const std::vector<int64_t>&)>& load,
    int64_t epoch);

}  // namespace ddprun::examples
