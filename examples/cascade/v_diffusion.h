#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace ddprun::examples {

// Gaussian diffusion over `num_timesteps` steps (the guide's
// num_timesteps, 1000) on DDPM's linear beta schedule, 1e-4 .. 0.02 at
// 1000 steps (scaled by 1000 / num_timesteps for other lengths, so the
// total noise stays the same). Sampling is deterministic DDIM (eta = 0)
// over `sampling_steps` of them; training draws t uniformly from all steps,
// or, with `train_on_sampling_steps`, from those the sampler visits (as
// Fast-DDPM: the network learns only the noise levels it is asked for,
// which takes far fewer steps).
// The network predicts v = sqrt(abar) eps - sqrt(1 - abar) x0 (the
// guide's v_parameterization) or, without it, eps.
class VDiffusion {
 public:
  VDiffusion(int64_t num_timesteps, bool v_parameterization,
             int64_t sampling_steps, bool train_on_sampling_steps = false);

  int64_t num_timesteps() const {
    return static_cast<int64_t>(alpha_bar_.size());
  }
  bool v_parameterization() const { return v_; }
  double alpha_bar(int64_t t) const { return alpha_bar_.at(t); }
  // The sampling timesteps, descending (first num_timesteps - 1, last 0).
  const std::vector<int64_t>& sampling_timesteps() const { return sampling_; }

  // One noised batch: x_t, t (int64 [B]), the regression target, and
  // sqrt(abar) / sqrt(1 - abar) per sample, shaped to broadcast over x0.
  struct Noised {
    torch::Tensor x_t, t, target, signal, noise;
  };
  // Noise and t come from `generator` (CPU; moved to x0's device).
  Noised AddNoise(const torch::Tensor& x0, at::Generator generator) const;

  // The clean volume the network's `output` implies for `noised`.
  torch::Tensor PredictX0(const Noised& noised,
                          const torch::Tensor& output) const;

  // Deterministic sampling; `model(x_t, t)` returns the network output,
  // `noise` is the starting x_T. Returns the predicted x0, clamped to
  // [-1, 1].
  torch::Tensor Sample(const std::function<torch::Tensor(
                           const torch::Tensor&, const torch::Tensor&)>& model,
                       torch::Tensor noise) const;

 private:
  bool v_;
  bool train_on_sampling_steps_;
  std::vector<double> alpha_bar_;
  std::vector<int64_t> sampling_;
};

}  // namespace ddprun::examples
