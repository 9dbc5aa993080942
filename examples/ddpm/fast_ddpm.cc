#include "examples/ddpm/fast_ddpm.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "ddprun/worker/errors.h"

namespace ddprun::examples {
namespace {

std::vector<int64_t> Timesteps(int64_t steps, int64_t total,
                               TimestepSchedule schedule) {
  std::vector<int64_t> ts;
  if (steps == 1) return {0};
  if (schedule == TimestepSchedule::kUniform) {
    // Fast-DDPM: arange(-1, T, T / steps) with the first set to 0.
    const int64_t skip = total / steps;
    ts.push_back(0);
    for (int64_t k = 1; k < steps; ++k) ts.push_back(k * skip - 1);
    return ts;
  }
  // Fast-DDPM's non-uniform: its list for 10 of 1000, else
  // ceil(linspace(0, 0.7 T - 1, n1 + 1)[:-1]) then
  // ceil(linspace(0.7 T - 1, T - 1, n2)) with n1 = 40%, n2 = 60% of the steps.
  if (steps == 10 && total == 1000)
    return {0, 199, 399, 599, 699, 799, 849, 899, 949, 999};
  const int64_t n1 = std::max<int64_t>(1, steps * 4 / 10);
  const int64_t n2 = steps - n1;
  const double knee = std::ceil(0.7 * total) - 1;  // 699 of 1000
  for (int64_t k = 0; k < n1; ++k)
    ts.push_back(static_cast<int64_t>(std::ceil(knee * k / n1)));
  for (int64_t k = 0; k < n2; ++k) {
    const double f = n2 == 1 ? 1.0 : static_cast<double>(k) / (n2 - 1);
    ts.push_back(
        static_cast<int64_t>(std::ceil(knee + (total - 1 - knee) * f)));
  }
  // Few steps over a short schedule can repeat a timestep: keep each once.
  std::sort(ts.begin(), ts.end());
  ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  return ts;
}

}  // namespace

Prediction ParsePrediction(const std::string& name) {
  if (name == "eps") return Prediction::kEps;
  if (name == "v") return Prediction::kV;
  if (name == "x0") return Prediction::kX0;
  throw worker::ConfigError("--prediction must be eps, v or x0, got '" + name +
                            "'");
}

std::string PredictionName(Prediction p) {
  switch (p) {
    case Prediction::kEps:
      return "eps";
    case Prediction::kV:
      return "v";
    case Prediction::kX0:
      return "x0";
  }
  return "?";
}

TimestepSchedule ParseTimestepSchedule(const std::string& name) {
  if (name == "uniform") return TimestepSchedule::kUniform;
  if (name == "non-uniform" || name == "non_uniform")
    return TimestepSchedule::kNonUniform;
  throw worker::ConfigError(
      "--scheduler_type must be uniform or non-uniform, got '" + name + "'");
}

FastDdpm::FastDdpm(const FastDdpmOptions& options) : options_(options) {
  const int64_t total = options.total_steps;
  if (total < 2 || options.steps < 1 || options.steps > total) {
    throw worker::ConfigError(
        "Fast-DDPM needs 1 <= --timesteps <= --num_diffusion_timesteps and "
        "at least 2 diffusion timesteps, got " +
        std::to_string(options.steps) + " of " + std::to_string(total));
  }
  if (!(options.beta_start > 0 && options.beta_end < 1 &&
        options.beta_start <= options.beta_end)) {
    throw worker::ConfigError(
        "the beta schedule needs 0 < beta_start <= beta_end < 1");
  }
  double prod = 1.0;
  for (int64_t t = 0; t < total; ++t) {
    const double beta =
        options.beta_start +
        (options.beta_end - options.beta_start) * t / (total - 1);
    prod *= 1.0 - beta;
    alpha_bar_.push_back(prod);
  }
  timesteps_ = Timesteps(options.steps, total, options.schedule);
}

torch::Tensor FastDdpm::Noise(const torch::Tensor& x0, int64_t t,
                              const torch::Tensor& eps) const {
  const double ab = alpha_bar_.at(t);
  return std::sqrt(ab) * x0 + std::sqrt(1.0 - ab) * eps;
}

FastDdpm::Noised FastDdpm::AddNoise(const torch::Tensor& x0) const {
  const int64_t n = x0.size(0);
  torch::Tensor pick = torch::randint(static_cast<int64_t>(timesteps_.size()),
                                      {n}, torch::kInt64);
  std::vector<int64_t> ts;
  std::vector<float> a, s;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = timesteps_[pick[i].item<int64_t>()];
    ts.push_back(t);
    a.push_back(static_cast<float>(std::sqrt(alpha_bar_[t])));
    s.push_back(static_cast<float>(std::sqrt(1.0 - alpha_bar_[t])));
  }
  std::vector<int64_t> view{n};
  for (int64_t d = 1; d < x0.dim(); ++d) view.push_back(1);
  torch::Tensor sa = torch::tensor(a).view(view).to(x0.options());
  torch::Tensor sb = torch::tensor(s).view(view).to(x0.options());
  torch::Tensor eps = torch::randn_like(x0);
  Noised out;
  out.x_t = sa * x0 + sb * eps;
  out.t = torch::tensor(ts).to(x0.device());
  switch (options_.prediction) {
    case Prediction::kEps:
      out.target = eps;
      break;
    case Prediction::kV:
      out.target = sa * eps - sb * x0;
      break;
    case Prediction::kX0:
      out.target = x0;
      break;
  }
  return out;
}

std::pair<torch::Tensor, torch::Tensor> FastDdpm::Estimate(
    const torch::Tensor& x_t, int64_t t, const torch::Tensor& out) const {
  const double ab = alpha_bar_.at(t), sa = std::sqrt(ab),
               sb = std::sqrt(1.0 - ab);
  switch (options_.prediction) {
    case Prediction::kEps:
      return {(x_t - sb * out) / sa, out};
    case Prediction::kV:
      return {sa * x_t - sb * out, sb * x_t + sa * out};
    case Prediction::kX0:
      return {out, (x_t - sa * out) / sb};
  }
  return {};
}

torch::Tensor FastDdpm::Sample(
    const std::function<torch::Tensor(const torch::Tensor&,
                                      const torch::Tensor&)>& model,
    torch::IntArrayRef shape, const torch::TensorOptions& options) const {
  torch::Tensor x = torch::randn(shape, options);
  torch::Tensor x0;
  for (int64_t k = static_cast<int64_t>(timesteps_.size()) - 1; k >= 0; --k) {
    const int64_t t = timesteps_[k];
    torch::Tensor out =
        model(x,
              torch::full(
                  {shape[0]}, t,
                  torch::TensorOptions(torch::kInt64).device(options.device())))
            .to(x.scalar_type());
    auto [x0_hat, eps] = Estimate(x, t, out);
    x0 = x0_hat.clamp(-1, 1);
    if (k == 0) break;
    const double ab_prev = alpha_bar_[timesteps_[k - 1]];
    x = std::sqrt(ab_prev) * x0 + std::sqrt(1.0 - ab_prev) * eps;
  }
  return x0;
}

}  // namespace ddprun::examples
