#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/precision.h"
#include "ddprun/worker/sharded_adam.h"
#include "ddprun/worker/world.h"
#include "examples/frame/step_profiler.h"

namespace torch::optim {
class Optimizer;
}

namespace ddprun::examples {

struct StepRunnerOptions {
  bool loss_scaling = false;         // fp16: dynamic loss scaling (GradScaler)
  double clip_grad_norm = 0;         // > 0: clip the global gradient norm
  worker::GradScalerOptions scaler;  // `enabled` follows loss_scaling
  // --profile: times the step's phases (forward, backward, the gradient
  // all-reduce wait, optimizer); null or disabled: nothing is measured.
  // Must outlive the runner.
  StepProfiler* profiler = nullptr;
  // Called with the step's mean loss after the backward passes and the
  // finite check, before anything is applied (the step agreement of restart
  // scope "failed"); it may replace the loss (by its mean over ranks). An
  // exception it throws leaves the step unapplied.
  std::function<void(double* loss)> before_apply;
};

// One optimizer step over the micro-batches of a step (gradient
// accumulation), the same for every trainer:
//   zero the gradients; for each micro-batch m of n: backward of
//   micro_loss(m) / n (times the loss scale under fp16), inside DDP's
//   no_sync for all but the last so gradients are all-reduced once per
//   step; then, under fp16, unscale and skip the step (and halve the scale)
//   when a gradient is inf/NaN; clip; optimizer step.
// With equal micro-batches of mean-reduced losses this is the gradient of
// one batch of n times the size. No collective beyond DDP's own (and
// ShardedAdam's): with DDP the finite check needs none, since every rank
// holds the same averaged gradients.
// Exactly one of `optimizer` and `sharded` is non-null; `ddp` is null when
// the optimizer reduces gradients itself (ZeRO-2) or in tests. Not
// thread-safe; collective when DDP or the sharded optimizer is.
class StepRunner {
 public:
  StepRunner(worker::World world, std::vector<at::Tensor> params,
             torch::optim::Optimizer* optimizer, worker::ShardedAdam* sharded,
             worker::DistributedDataParallel* ddp, StepRunnerOptions options);

  // Runs the step; returns the mean of the n micro losses (unscaled).
  double Step(int64_t n, const std::function<at::Tensor(int64_t)>& micro_loss);

  // Steps skipped for inf/NaN gradients so far, and the current scale
  // (1 without loss scaling).
  int64_t skipped_steps() const { return skipped_; }
  double loss_scale() const { return scaler_.scale(); }
  // The learning rate of the first parameter group.
  double learning_rate() const;

  // The DDP to synchronise through from now on (restart scope "failed"
  // builds a new one after a re-form); null: none.
  void Rebind(worker::DistributedDataParallel* ddp) { ddp_ = ddp; }
  // The state a step changes besides the model and optimizer (the
  // GradScaler's, the skipped steps), as numbers for healing; and back.
  std::vector<double> HealState() const;
  void RestoreHealState(const std::vector<double>& state);

 private:
  void ZeroGrad();
  // loss.backward() (through DDP when synchronising), charged to the
  // profiler's backward and all-reduce-wait phases.
  void Backward(const at::Tensor& scaled, bool sync);

  worker::World world_;
  std::vector<at::Tensor> params_;
  torch::optim::Optimizer* optimizer_;
  worker::ShardedAdam* sharded_;
  worker::DistributedDataParallel* ddp_;
  StepRunnerOptions options_;
  worker::GradScaler scaler_;
  int64_t skipped_ = 0;
  StepProfiler disabled_profiler_;
  StepProfiler* profiler_;  // options_.profiler or disabled_profiler_
  // When profiling: steady-clock nanoseconds at which the latest parameter
  // gradient was produced (set by hooks on every parameter).
  std::shared_ptr<std::atomic<int64_t>> last_grad_ns_;
};

}  // namespace ddprun::examples
