#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/types.h>

namespace ddprun::examples {

// What the network predicts from (x_t, t, conditions).
enum class Prediction {
  kEps,  // the noise (DDPM, Fast-DDPM)
  kV,    // v = sqrt(abar) * eps - sqrt(1 - abar) * x0 (Salimans & Ho 2022)
  kX0,   // the clean volume itself
};
// "eps", "v" or "x0" -> Prediction; throws worker::ConfigError otherwise.
Prediction ParsePrediction(const std::string& name);
std::string PredictionName(Prediction p);

// Which `steps` of the `total_steps` are used (Fast-DDPM's two schedulers):
// uniform 0, s - 1, 2s - 1, ... with s = total_steps / steps (Fast-DDPM's
// [0, 99, 199, ..., 899] for 10 of 1000); non-uniform puts 40% of them
// evenly in [0, 0.7 T) and 60% in [0.7 T, T) (for 10 of 1000 its list
// [0, 199, 399, 599, 699, 799, 849, 899, 949, 999]).
enum class TimestepSchedule { kUniform, kNonUniform };
// "uniform" or "non-uniform" (also "non_uniform"); ConfigError otherwise.
TimestepSchedule ParseTimestepSchedule(const std::string& name);

struct FastDdpmOptions {
  int64_t steps = 10;          // timesteps trained and sampled
  int64_t total_steps = 1000;  // the linear beta schedule's length
  double beta_start = 1e-4;
  double beta_end = 0.02;
  TimestepSchedule schedule = TimestepSchedule::kUniform;
  Prediction prediction = Prediction::kEps;
};

// Fast-DDPM (Jiang et al. 2024): the usual linear beta schedule over
// total_steps, but training and sampling use only `steps` timesteps of it;
// sampling is deterministic DDIM (eta = 0) along those timesteps, each step
// estimating x0 (clamped to [-1, 1]) and moving to the previous timestep.
class FastDdpm {
 public:
  // Throws worker::ConfigError for steps outside [1, total_steps] or a
  // beta schedule outside (0, 1).
  explicit FastDdpm(const FastDdpmOptions& options);

  // The timesteps used, ascending and distinct (first 0).
  const std::vector<int64_t>& timesteps() const { return timesteps_; }
  double alpha_bar(int64_t t) const { return alpha_bar_.at(t); }
  Prediction prediction() const { return options_.prediction; }

  // Draws one of the timesteps per sample, noises x0 and returns the
  // regression target of the network: {x_t, t, target}, on x0's device.
  struct Noised {
    torch::Tensor x_t, t, target;
  };
  Noised AddNoise(const torch::Tensor& x0) const;
  // x_t of x0 at timestep t for every sample, with the given noise.
  torch::Tensor Noise(const torch::Tensor& x0, int64_t t,
                      const torch::Tensor& eps) const;

  // The x0 (unclamped) and eps the network output `out` at (x_t, t) implies.
  std::pair<torch::Tensor, torch::Tensor> Estimate(
      const torch::Tensor& x_t, int64_t t, const torch::Tensor& out) const;

  // Deterministic sampling from noise of `shape`; `model(x_t, t)` returns the
  // network output for a batch. Returns the predicted x0 in [-1, 1].
  torch::Tensor Sample(const std::function<torch::Tensor(
                           const torch::Tensor&, const torch::Tensor&)>& model,
                       torch::IntArrayRef shape,
                       const torch::TensorOptions& options) const;

 private:
  FastDdpmOptions options_;
  std::vector<int64_t> timesteps_;
  std::vector<double> alpha_bar_;
};

}  // namespace ddprun::examples
