#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

namespace ddprun::examples {

// Fast-DDPM (Jiang et al. 2024): the usual 1000-step linear beta schedule
// (1e-4 .. 0.02), but training and sampling use only `steps` timesteps
// (10 by default) spread uniformly over it; sampling is deterministic
// (DDIM, eta = 0) along those timesteps.
// The network predicts either the noise (eps) or, with v-parameterization,
// v = sqrt(abar) * eps - sqrt(1 - abar) * x0.
class FastDdpm {
 public:
  FastDdpm(int64_t steps, bool v_parameterization, int64_t total_steps = 1000);

  // The timesteps used, ascending (first 0, last total_steps - 1).
  const std::vector<int64_t>& timesteps() const { return timesteps_; }
  double alpha_bar(int64_t t) const { return alpha_bar_.at(t); }

  // Draws one of the timesteps per sample, noises x0 and returns the
  // regression target for the network: {x_t, t, target}.
  struct Noised {
    torch::Tensor x_t, t, target;
  };
  Noised AddNoise(const torch::Tensor& x0) const;

  // Deterministic sampling from noise of `shape`; `model(x_t, t)` returns the
  // network output for a batch. Returns the predicted x0.
  torch::Tensor Sample(const std::function<torch::Tensor(
                           const torch::Tensor&, const torch::Tensor&)>& model,
                       torch::IntArrayRef shape,
                       const torch::TensorOptions& options) const;

 private:
  bool v_;
  std::vector<int64_t> timesteps_;
  std::vector<double> alpha_bar_;
};

}  // namespace ddprun::examples
