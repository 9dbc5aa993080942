#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "ddprun/worker/world.h"

namespace ddprun::worker {

struct SyncBatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

// Batch normalisation whose batch statistics are computed over the global
// batch of all ranks: each rank's per-channel count, mean and sum of squared
// deviations are all-gathered in forward and combined as PyTorch does
// (Chan's parallel variance: stable when |mean| >> std), and the two
// gradient sums are all-reduced in backward, so N ranks
// x batch B normalise exactly like one process with batch N*B (tested).
// Works for (N, C, *) inputs: 2D (N,C,H,W) and 3D (N,C,D,H,W) alike. Every
// rank must call forward the same number of times in training mode (each
// call is a collective). In eval mode it uses the running statistics and
// does no communication. Running stats update like torch BatchNorm (unbiased
// variance). In a standalone world it is plain batch norm.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(World world, SyncBatchNormOptions options);
  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  World world_;
  SyncBatchNormOptions options_;
};
TORCH_MODULE(SyncBatchNorm);

}  // namespace ddprun::worker
