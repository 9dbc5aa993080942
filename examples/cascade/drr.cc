#include "examples/cascade/drr.h"

namespace ddprun::examples {

namespace F = torch::nn::functional;

const char* ViewName(int64_t view) { return view == 0 ? "frontal" : "lateral"; }

torch::Tensor Drr(const torch::Tensor& volume, int64_t view) {
  // H is dim -2, W is dim -1.
  const int64_t axis = view == 0 ? -2 : -1;
  const torch::Tensor attenuation =
      ((volume.to(torch::kFloat32) + 1.0) * 0.5).clamp_min(0.0);
  return 1.0 - torch::exp(-kOpticalDepth * attenuation.mean(axis));
}

torch::Tensor ViewAtVolumeSize(const torch::Tensor& views, int64_t view,
                               const std::vector<int64_t>& volume_size) {
  const int64_t rows = volume_size.at(0);
  const int64_t cols = view == 0 ? volume_size.at(2) : volume_size.at(1);
  torch::Tensor v = views.select(1, view).unsqueeze(1).to(torch::kFloat32);
  return F::adaptive_avg_pool2d(v, F::AdaptiveAvgPool2dFuncOptions(
                                       std::vector<int64_t>{rows, cols}))
      .squeeze(1);
}

torch::Tensor BackProjection(const torch::Tensor& views,
                             const std::vector<int64_t>& volume_size) {
  const int64_t d = volume_size.at(0), h = volume_size.at(1),
                w = volume_size.at(2);
  std::vector<torch::Tensor> volumes;
  for (int64_t v = 0; v < views.size(1); ++v) {
    // Below 1 - e^-kOpticalDepth, the brightest a view can be: the log
    // stays finite for saturated (or 8-bit rounded up) pixels.
    const torch::Tensor intensity =
        ViewAtVolumeSize(views, v, volume_size).clamp(0.0, 1.0 - 1e-4);
    const torch::Tensor attenuation =
        (-torch::log1p(-intensity) / kOpticalDepth).clamp(0.0, 1.0);
    const torch::Tensor value = attenuation * 2.0 - 1.0;  // [B, rows, cols]
    // Frontal (D x W) runs along H; lateral (D x H) along W.
    volumes.push_back(v == 0 ? value.unsqueeze(2).expand({-1, d, h, w})
                             : value.unsqueeze(3).expand({-1, d, h, w}));
  }
  return torch::stack(volumes, 1);
}

torch::Tensor PhysicsLoss(const torch::Tensor& volume,
                          const torch::Tensor& views, bool per_sample) {
  const std::vector<int64_t> size(volume.sizes().end() - 3,
                                  volume.sizes().end());
  torch::Tensor total;
  for (int64_t v = 0; v < views.size(1); ++v) {
    const torch::Tensor projection = Drr(volume, v).squeeze(1);  // [B, r, c]
    const torch::Tensor target = ViewAtVolumeSize(views, v, size);
    torch::Tensor err = (projection - target).pow(2).mean({1, 2});
    total = total.defined() ? total + err : err;
  }
  total = total / static_cast<double>(views.size(1));
  return per_sample ? total : total.mean();
}

}  // namespace ddprun::examples
