#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace ddprun::worker {

// torch::optim::Adam and AdamW with the same options, the same per-parameter
// state (step, exp_avg, exp_avg_sq: checkpoints load either way) and the
// same update, whose step() runs one loop per parameter over its elements
// instead of about ten tensor operations. Torch's step costs 1-1.2 ms for
// our trainers' ~60 parameter tensors of 0.2-0.9 MB in all, almost all of it
// per-operation overhead, and every data-parallel rank repeats it, so it
// does not shrink with more ranks (issue 14); the loop takes about a tenth.
// Results equal Torch's up to float rounding (the compiler may fuse a
// multiply and an add). Parameters that are not dense contiguous CPU float32
// tensors, amsgrad and a closure take Torch's own step (for the whole step).
// Not thread-safe, like Torch's optimizers.
class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddprun::worker
