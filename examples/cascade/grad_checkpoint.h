#pragma once

#include <vector>

#include <torch/torch.h>

namespace ddprun::examples {

// A piece of a network whose activations need not be kept for backward:
// it can run again from its inputs. Recompute must be deterministic (no
// dropout or other randomness) and must read no tensor that requires grad
// except `inputs` and RecomputeParameters().
class Recomputable {
 public:
  virtual ~Recomputable() = default;
  virtual at::Tensor Recompute(const std::vector<at::Tensor>& inputs) = 0;
  // The parameters Recompute reads, always in the same order.
  virtual std::vector<at::Tensor> RecomputeParameters() = 0;
};

// The autocast a training forward ran under, so that backward's
// recomputation computes in the same precision (backward itself runs
// outside the autocast scope of the forward pass).
struct RecomputeAutocast {
  bool enabled = false;
  c10::Device device = c10::Device(c10::kCPU);
  at::ScalarType dtype = at::kBFloat16;
};

// Gradient checkpointing (activation recomputation) for LibTorch, which
// has no torch::utils::checkpoint in C++: with grad mode on, runs
// block->Recompute(inputs) without recording the graph inside the block
// (its intermediate activations are freed at once) and, in backward, runs
// it again with grad mode on (and `autocast`) to get the gradients of the
// inputs and of the block's parameters. The parameters are inputs of the
// recorded node, so their gradients reach them through autograd's usual
// accumulation, after the node and before anything else touches them: DDP's
// gradient hooks and find_unused_parameters see them as for any layer, and
// no backward runs inside another (the non-reentrant form). Gradients equal
// those of the plain call (the same operations in the same order).
// With grad mode off (validation) it is the plain call.
// `block` must outlive the backward pass. Same thread rules as autograd.
at::Tensor CheckpointedCall(Recomputable* block,
                            const std::vector<at::Tensor>& inputs,
                            const RecomputeAutocast& autocast);

}  // namespace ddprun::examples
