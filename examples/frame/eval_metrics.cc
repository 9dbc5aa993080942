#include "examples/frame/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <torch/torch.h>

namespace ddprun::examples {

double ConcordanceIndex(const std::vector<double>& risk,
                        const std::vector<double>& time,
                        const std::vector<double>& event) {
  double concordant = 0, comparable = 0;
  const size_t n = risk.size();
  for (size_t i = 0; i < n; ++i) {
    if (event[i] <= 0.5) continue;
    for (size_t j = 0; j < n; ++j) {
      if (!(time[i] < time[j])) continue;
      comparable += 1;
      if (risk[i] > risk[j]) {
        concordant += 1;
      } else if (risk[i] == risk[j]) {
        concordant += 0.5;
      }
    }
  }
  return comparable > 0 ? concordant / comparable : 0.5;
}

double Auroc(const std::vector<double>& score,
             const std::vector<double>& label) {
  const size_t n = score.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return score[a] < score[b]; });
  // Average ranks over ties, then Mann-Whitney U.
  std::vector<double> rank(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && score[order[j + 1]] == score[order[i]]) ++j;
    double r = (static_cast<double>(i) + j) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = r;
    i = j + 1;
  }
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (label[i] > 0.5) {
      positives += 1;
      rank_sum += rank[i];
    }
  }
  double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0)
    return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1) / 2.0) /
         (positives * negatives);
}

double MeanAuroc(const torch::Tensor& scores, const torch::Tensor& labels,
                 const torch::Tensor& mask) {
  torch::Tensor s = scores.to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor l = labels.to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor m = mask.to(torch::kCPU, torch::kFloat64).contiguous();
  double sum = 0;
  int count = 0;
  for (int64_t k = 0; k < s.size(1); ++k) {
    std::vector<double> sc, lb;
    for (int64_t i = 0; i < s.size(0); ++i) {
      if (m[i][k].item<double>() > 0.5) {
        sc.push_back(s[i][k].item<double>());
        lb.push_back(l[i][k].item<double>());
      }
    }
    double a = Auroc(sc, lb);
    if (!std::isnan(a)) {
      sum += a;
      ++count;
    }
  }
  return count ? sum / count : std::numeric_limits<double>::quiet_NaN();
}

std::pair<double, double> DiceSums(const torch::Tensor& probs,
                                   const torch::Tensor& target) {
  torch::Tensor p = probs.detach().gt(0.5).to(torch::kFloat64);
  torch::Tensor g = target.detach().gt(0.5).to(torch::kFloat64);
  return {(p * g).sum().item<double>(), (p.sum() + g.sum()).item<double>()};
}

double DiceFromSums(double intersection, double total) {
  return total > 0 ? 2.0 * intersection / total : 1.0;
}

double Psnr(const torch::Tensor& prediction, const torch::Tensor& target,
            double data_range) {
  double mse = (prediction.detach().to(torch::kFloat64) -
                target.detach().to(torch::kFloat64))
                   .pow(2)
                   .mean()
                   .item<double>();
  if (mse <= 0) return 100.0;
  return 10.0 * std::log10(data_range * data_range / mse);
}

double Ssim(const torch::Tensor& prediction, const torch::Tensor& target,
            double data_range) {
  const bool volume = prediction.dim() >= 3;
  const int spatial = volume ? 3 : 2;
  std::vector<int64_t> shape{-1, 1};
  for (int i = spatial; i > 0; --i)
    shape.push_back(prediction.size(prediction.dim() - i));
  torch::Tensor x = prediction.detach().to(torch::kFloat64).reshape(shape);
  torch::Tensor y = target.detach().to(torch::kFloat64).reshape(shape);
  int64_t window = 7;
  for (int i = 2; i < x.dim(); ++i)
    window = std::min<int64_t>(window, x.size(i));
  auto pool = [&](const torch::Tensor& t) {
    return volume ? torch::avg_pool3d(t, window, 1)
                  : torch::avg_pool2d(t, window, 1);
  };
  const double c1 = std::pow(0.01 * data_range, 2),
               c2 = std::pow(0.03 * data_range, 2);
  torch::Tensor mx = pool(x), my = pool(y);
  torch::Tensor vx = pool(x * x) - mx * mx, vy = pool(y * y) - my * my,
                cxy = pool(x * y) - mx * my;
  torch::Tensor s = ((2 * mx * my + c1) * (2 * cxy + c2)) /
                    ((mx * mx + my * my + c1) * (vx + vy + c2));
  return s.mean().item<double>();
}

}  // namespace ddprun::examples
