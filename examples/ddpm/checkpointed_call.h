#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace ddprun::examples {

// The autocast a checkpointed block ran under, so its recomputation in the
// backward pass (which runs outside the trainer's forward-only autocast
// scope) computes in the same precision.
struct RecomputeAutocast {
  bool enabled = false;
  c10::Device device = c10::Device(c10::kCPU);
  at::ScalarType dtype = at::kBFloat16;
};

using CheckpointFn =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Activation (gradient) checkpointing, torch.utils.checkpoint's reentrant
// variant, which LibTorch's C++ API lacks (1.13 and 2.x alike): runs
// fn(inputs) without keeping the activations inside fn (forward under
// no-grad; only `inputs` are saved), and in the backward pass runs fn again
// with gradients on, under `autocast`, and back-propagates through that
// recomputation. Memory: the activations of one block at a time instead of
// all; cost: one more forward of fn.
// Gradients reach the inputs that require grad and every parameter fn uses
// (accumulated into .grad by the nested backward, so DDP's gradient hooks
// fire as usual: each parameter must be used by one checkpointed call per
// forward, as for torch's reentrant checkpoint under DDP).
// Contract: fn computes the same values both times (no dropout or other
// random op, no batch norm in training mode, whose running statistics would
// be updated twice), returns tensors of which at least one depends on the
// inputs, and whatever it captures outlives the backward pass. With grad
// mode off or no input requiring grad it just returns fn(inputs). Throws
// what fn throws.
std::vector<at::Tensor> CheckpointedCall(const CheckpointFn& fn,
                                         const std::vector<at::Tensor>& inputs,
                                         const RecomputeAutocast& autocast);

}  // namespace ddprun::examples
