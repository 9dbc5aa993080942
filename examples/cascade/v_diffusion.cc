#include "examples/cascade/v_diffusion.h"

#include <algorithm>
#include <cmath>

#include "ddprun/worker/errors.h"

namespace ddprun::examples {
namespace {

// [B] -> [B, 1, ..., 1] with the dims of `like`.
torch::Tensor PerSample(const std::vector<float>& values,
                        const torch::Tensor& like) {
  std::vector<int64_t> shape{static_cast<int64_t>(values.size())};
  for (int64_t d = 1; d < like.dim(); ++d) shape.push_back(1);
  return torch::tensor(values).view(shape).to(like.device());
}

}  // namespace

VDiffusion::VDiffusion(int64_t num_timesteps, bool v_parameterization,
                       int64_t sampling_steps, bool train_on_sampling_steps)
    : v_(v_parameterization),
      train_on_sampling_steps_(train_on_sampling_steps) {
  if (num_timesteps < 2 || sampling_steps < 1 ||
      sampling_steps > num_timesteps) {
    throw worker::ConfigError(
        "num_timesteps must be >= 2 and sampling steps within 1.." +
        std::to_string(num_timesteps));
  }
  const double scale = 1000.0 / static_cast<double>(num_timesteps);
  double keep = 1.0;
  for (int64_t t = 0; t < num_timesteps; ++t) {
    const double beta = std::min(
        0.999, scale * (1e-4 + (0.02 - 1e-4) * t / (num_timesteps - 1.0)));
    keep *= 1.0 - beta;
    alpha_bar_.push_back(keep);
  }
  for (int64_t k = sampling_steps - 1; k >= 0; --k) {
    sampling_.push_back(
        sampling_steps == 1
            ? num_timesteps - 1
            : std::llround(k * (num_timesteps - 1.0) / (sampling_steps - 1)));
  }
}

VDiffusion::Noised VDiffusion::AddNoise(const torch::Tensor& x0,
                                        at::Generator generator) const {
  const int64_t n = x0.size(0);
  torch::Tensor t = at::randint(num_timesteps(), {n}, generator,
                                torch::TensorOptions(torch::kInt64));
  if (train_on_sampling_steps_) {
    const torch::Tensor pick =
        at::randint(static_cast<int64_t>(sampling_.size()), {n}, generator,
                    torch::TensorOptions(torch::kInt64));
    t = torch::tensor(sampling_).index_select(0, pick);
  }
  std::vector<float> signal, noise;
  for (int64_t i = 0; i < n; ++i) {
    const double ab = alpha_bar_[t[i].item<int64_t>()];
    signal.push_back(static_cast<float>(std::sqrt(ab)));
    noise.push_back(static_cast<float>(std::sqrt(1.0 - ab)));
  }
  Noised out;
  out.signal = PerSample(signal, x0).to(x0.dtype());
  out.noise = PerSample(noise, x0).to(x0.dtype());
  const torch::Tensor eps =
      at::randn(x0.sizes(), generator, torch::TensorOptions(x0.dtype()))
          .to(x0.device());
  out.x_t = out.signal * x0 + out.noise * eps;
  out.t = t.to(x0.device());
  out.target = v_ ? out.signal * eps - out.noise * x0 : eps;
  return out;
}

torch::Tensor VDiffusion::PredictX0(const Noised& n,
                                    const torch::Tensor& output) const {
  if (v_) return n.signal * n.x_t - n.noise * output;
  // eps-prediction divides by sqrt(abar), tiny at the noisy end: keep the
  // estimate in a sane range.
  return ((n.x_t - n.noise * output) / n.signal).clamp(-2.0, 2.0);
}

torch::Tensor VDiffusion::Sample(
    const std::function<torch::Tensor(const torch::Tensor&,
                                      const torch::Tensor&)>& model,
    torch::Tensor x) const {
  torch::Tensor x0;
  for (size_t k = 0; k < sampling_.size(); ++k) {
    const int64_t t = sampling_[k];
    const double sa = std::sqrt(alpha_bar_[t]),
                 sb = std::sqrt(1.0 - alpha_bar_[t]);
    const torch::Tensor out =
        model(x, torch::full(
                     {x.size(0)}, t,
                     torch::TensorOptions(torch::kInt64).device(x.device())))
            .to(x.scalar_type());
    torch::Tensor eps;
    if (v_) {
      x0 = sa * x - sb * out;
      eps = sb * x + sa * out;
    } else {
      x0 = (x - sb * out) / sa;
      eps = out;
    }
    x0 = x0.clamp(-1, 1);
    if (k + 1 == sampling_.size()) break;
    const double ab_next = alpha_bar_[sampling_[k + 1]];
    x = std::sqrt(ab_next) * x0 + std::sqrt(1.0 - ab_next) * eps;
  }
  return x0;
}

}  // namespace ddprun::examples
