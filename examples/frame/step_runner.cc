#include "examples/frame/step_runner.h"

#include <algorithm>
#include <chrono>

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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             StepProfiler::Clock::now().time_since_epoch())
      .count();
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
      scaler_(world, ScalerOptions(options, ddp != nullptr)),
      profiler_(options.profiler != nullptr ? options.profiler
                                            : &disabled_profiler_) {
  if ((optimizer_ == nullptr) == (sharded_ == nullptr)) {
    throw worker::ConfigError(
        "StepRunner needs exactly one of an optimizer and a sharded one");
  }
  if (!profiler_->enabled() || ddp_ == nullptr || !world_.distributed()) {
    return;
  }
  // The last gradient autograd produces ends the backward computation;
  // what Backward() spends after it is DDP waiting for its all-reduce.
  // Only registered when profiling: a hook per parameter per step.
  last_grad_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  for (const at::Tensor& p : params_) {
    if (!p.requires_grad()) continue;
    p.register_hook([last = last_grad_ns_](const at::Tensor&) {
      last->store(NowNs(), std::memory_order_relaxed);
    });
  }
}

void StepRunner::ZeroGrad() {
  if (optimizer_ != nullptr) optimizer_->zero_grad();
  if (sharded_ != nullptr) sharded_->ZeroGrad();
}

void StepRunner::Backward(const at::Tensor& scaled, bool sync) {
  const bool timed = profiler_->enabled();
  int64_t start = 0;
  if (timed) {
    profiler_->SyncDevice();
    start = NowNs();
    if (last_grad_ns_) last_grad_ns_->store(start);
  }
  if (ddp_ == nullptr) {
    scaled.backward();
  } else if (sync) {
    ddp_->Backward(scaled);
  } else {
    auto no_sync = ddp_->NoSync();
    ddp_->Backward(scaled);
  }
  if (!timed) return;
  profiler_->SyncDevice();
  const int64_t end = NowNs();
  const int64_t computed = sync && last_grad_ns_
                               ? std::clamp(last_grad_ns_->load(), start, end)
                               : end;
  profiler_->Add(Phase::kBackward, (computed - start) * 1e-9);
  profiler_->Add(Phase::kGradSync, (end - computed) * 1e-9);
}

double StepRunner::Step(int64_t n,
                        const std::function<at::Tensor(int64_t)>& micro_loss) {
  if (n < 1) throw worker::WorkerError("StepRunner::Step: no micro-batch");
  {
    auto span = profiler_->Measure(Phase::kOptimizer);
    ZeroGrad();
  }
  at::Tensor total;
  for (int64_t m = 0; m < n; ++m) {
    at::Tensor loss;
    {
      auto span = profiler_->Measure(Phase::kForward);
      loss = micro_loss(m);
    }
    total = total.defined() ? total + loss.detach() : loss.detach();
    Backward(scaler_.Scale(loss / static_cast<double>(n)), m + 1 == n);
  }
  auto span = profiler_->Measure(Phase::kOptimizer);
  const bool finite = scaler_.Unscale(params_);
  double loss = total.item<double>() / static_cast<double>(n);
  if (options_.before_apply) options_.before_apply(&loss);
  if (finite) {
    // ZeRO-2 (no DDP): the gradients here are this rank's, not yet reduced;
    // the sharded optimizer clips the reduced ones.
    const bool local_grads = sharded_ != nullptr && ddp_ == nullptr;
    if (options_.clip_grad_norm > 0 && !local_grads) {
      worker::ClipGradNorm(params_, options_.clip_grad_norm);
    }
    if (optimizer_ != nullptr) optimizer_->step();
    if (sharded_ != nullptr) {
      sharded_->Step(local_grads ? options_.clip_grad_norm : 0.0);
    }
  } else {
    ++skipped_;
  }
  scaler_.Update();
  return loss;
}

std::vector<double> StepRunner::HealState() const {
  const worker::GradScaler::State s = scaler_.state();
  return {s.scale, static_cast<double>(s.good_steps),
          static_cast<double>(skipped_)};
}

void StepRunner::RestoreHealState(const std::vector<double>& state) {
  if (state.size() != 3) {
    throw worker::WorkerError("StepRunner: a heal state of " +
                              std::to_string(state.size()) +
                              " numbers, expected 3");
  }
  scaler_.set_state({state[0], static_cast<int64_t>(state[1])});
  skipped_ = static_cast<int64_t>(state[2]);
}

double StepRunner::learning_rate() const {
  if (sharded_ != nullptr) return sharded_->lr();
  return optimizer_->param_groups().at(0).options().get_lr();
}

}  // namespace ddprun::examples
