#include "examples/common/step_runner.h"

#include <torch/torch.h>

#include "ddprun/worker/errors.h"

namespace ddprun::examples {
namespace {

worker::GradScalerOptions ScalerOptions(const StepRunnerOptions& o, bool ddp) {
  worker::GradScalerOptions s = o.scaler;
  s.enabled = o.loss_scaling;
  // DDP hands every rank the same averaged gradients.
  s.grads_synchronized = ddp;
  return s;
}

}  // namespace

StepRunner::StepRunner(worker::World world, std::vector<at::Tensor> params,
                       torch::optim::Optimizer* optimizer,
                       worker::ShardedAdam* sharded,
                       worker::DistributedDataParallel* ddp,
                       StepRunnerOptions options)
    : world_(world),
      params_(std::move(params)),
      optimizer_(optimizer),
      sharded_(sharded),
      ddp_(ddp),
      options_(options),
      scaler_(world, ScalerOptions(options, ddp != nullptr)) {
  if ((optimizer_ == nullptr) == (sharded_ == nullptr)) {
    throw worker::ConfigError(
        "StepRunner needs exactly one of an optimizer and a sharded one");
  }
}

void StepRunner::ZeroGrad() {
  if (optimizer_ != nullptr) optimizer_->zero_grad();
  if (sharded_ != nullptr) sharded_->ZeroGrad();
}

double StepRunner::Step(int64_t n,
                        const std::function<at::Tensor(int64_t)>& micro_loss) {
  if (n < 1) throw worker::WorkerError("StepRunner::Step: no micro-batch");
  ZeroGrad();
  at::Tensor total;
  for (int64_t m = 0; m < n; ++m) {
    const at::Tensor loss = micro_loss(m);
    total = total.defined() ? total + loss.detach() : loss.detach();
    const at::Tensor scaled = scaler_.Scale(loss / static_cast<double>(n));
    if (ddp_ == nullptr) {
      scaled.backward();
    } else if (m + 1 == n) {
      ddp_->Backward(scaled);
    } else {
      auto no_sync = ddp_->NoSync();
      ddp_->Backward(scaled);
    }
  }
  if (scaler_.Unscale(params_)) {
    if (options_.clip_grad_norm > 0) {
      worker::ClipGradNorm(params_, options_.clip_grad_norm);
    }
    if (optimizer_ != nullptr) optimizer_->step();
    if (sharded_ != nullptr) sharded_->Step();
  } else {
    ++skipped_;
  }
  scaler_.Update();
  return total.item<double>() / static_cast<double>(n);
}

double StepRunner::learning_rate() const {
  if (sharded_ != nullptr) return sharded_->lr();
  return optimizer_->param_groups().at(0).options().get_lr();
}

}  // namespace ddprun::examples
