#include "examples/ddpm/fast_ddpm.h"

#include <cmath>

#include <torch/torch.h>

namespace ddprun::examples {

FastDdpm::FastDdpm(int64_t steps, bool v_parameterization, int64_t total_steps)
    : v_(v_parameterization) {
  double prod = 1.0;
  for (int64_t t = 0; t < total_steps; ++t) {
    const double beta = 1e-4 + (0.02 - 1e-4) * t / (total_steps - 1);
    prod *= 1.0 - beta;
    alpha_bar_.push_back(prod);
  }
  for (int64_t k = 0; k < steps; ++k) {
    timesteps_.push_back(
        steps == 1 ? total_steps - 1
                   : std::llround(k * (total_steps - 1.0) / (steps - 1)));
  }
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
  out.target = v_ ? sa * eps - sb * x0 : eps;
  return out;
}

torch::Tensor FastDdpm::Sample(
    const std::function<torch::Tensor(const torch::Tensor&,
                                      const torch::Tensor&)>& model,
    torch::IntArrayRef shape, const torch::TensorOptions& options) const {
  torch::Tensor x = torch::randn(shape, options);
  torch::Tensor x0;
  for (int64_t k = static_cast<int64_t>(timesteps_.size()) - 1; k >= 0; --k) {
    const int64_t t = timesteps_[k];
    const double ab = alpha_bar_[t], sa = std::sqrt(ab),
                 sb = std::sqrt(1.0 - ab);
    torch::Tensor out =
        model(x, torch::full({shape[0]}, t, torch::kInt64)).to(x.scalar_type());
    torch::Tensor eps;
    if (v_) {
      x0 = sa * x - sb * out;
      eps = sb * x + sa * out;
    } else {
      x0 = (x - sb * out) / sa;
      eps = out;
    }
    x0 = x0.clamp(-1, 1);
    if (k == 0) break;
    const double ab_prev = alpha_bar_[timesteps_[k - 1]];
    x = std::sqrt(ab_prev) * x0 + std::sqrt(1.0 - ab_prev) * eps;
  }
  return x0;
}

}  // namespace ddprun::examples
