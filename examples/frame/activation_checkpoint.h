#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace ddprun::examples {

// Runs `run` inside whatever state the forward pass had that backward does
// not (the trainer's autocast scope), e.g.
//   [&](const std::function<void()>& run) {
//     auto autocast = session.Autocast(); run(); }
// Empty: run as is.
using RecomputeScope = std::function<void(const std::function<void()>&)>;

// The autocast a training forward ran under, as plain data (model options
// carry it; backward runs outside the forward's autocast scope).
struct RecomputeAutocast {
  bool enabled = false;
  c10::Device device = c10::Device(c10::kCPU);
  at::ScalarType dtype = at::kBFloat16;
};

// A RecomputeScope that recomputes under `autocast` (empty when it is off).
RecomputeScope AutocastRecompute(const RecomputeAutocast& autocast);

// Activation (gradient) checkpointing, written against the autograd API
// LibTorch 1.13 and 2.x share (torch::utils::checkpoint is Python only):
// returns fn(x), where fn is `module`'s computation, without keeping fn's
// intermediate activations. Backward recomputes fn from the saved input
// with gradients on, inside `scope`, and hands back the gradients of x and
// of `module`'s parameters. Same values and gradients as calling fn(x)
// directly (same kernels on the same inputs) for less memory: only the
// input of each checkpointed segment stays alive between forward and
// backward, plus one segment's activations during its backward.
//  - fn must be deterministic (no dropout) and use no trainable tensor
//    besides x and module.parameters().
//  - Buffers (batch-norm running statistics) are put back after the
//    recomputation, so a training step updates them once, as without
//    checkpointing. fn must not use collectives (SyncBatchNorm): backward
//    would run them on one rank's schedule.
//  - The parameters' gradients flow through the autograd graph of the outer
//    backward (not a nested backward), so DDP's gradient hooks and
//    no_sync/accumulation see them as usual.
//  - Without grad mode, or when neither x nor a parameter requires grad,
//    this is fn(x).
// `module` must outlive the backward pass. Training thread only.
torch::Tensor CheckpointedForward(
    torch::nn::Module& module,
    const std::function<torch::Tensor(const torch::Tensor&)>& fn,
    const torch::Tensor& x, const RecomputeScope& scope = {});

// The same for a computation of several tensors (a block's input and a
// conditioning vector, say): fn(inputs), the gradients of every input that
// requires grad and of `module`'s parameters. fn gets the inputs as a
// vector, so it must not capture tensors of the graph itself.
torch::Tensor CheckpointedForward(
    torch::nn::Module& module,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& fn,
    const std::vector<torch::Tensor>& inputs, const RecomputeScope& scope = {});

}  // namespace ddprun::examples
