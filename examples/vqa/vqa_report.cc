#include "examples/vqa/vqa_report.h"

#include <cmath>

#include <torch/torch.h>

#include "examples/frame/eval_metrics.h"
#include "examples/frame/outputs_observer.h"
#include "examples/outputs/bar_chart.h"
#include "examples/vqa/vqa_data.h"

namespace ddprun::examples {

std::vector<double> LabelAurocs(const torch::Tensor& scores,
                                const torch::Tensor& labels,
                                const torch::Tensor& mask) {
  const torch::Tensor s = scores.to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor l = labels.to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor m = mask.to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t n = s.size(0), k = s.size(1);
  const double* sp = s.data_ptr<double>();
  const double* lp = l.data_ptr<double>();
  const double* mp = m.data_ptr<double>();
  std::vector<double> out;
  for (int64_t c = 0; c < k; ++c) {
    std::vector<double> score, label;
    for (int64_t i = 0; i < n; ++i) {
      if (mp[i * k + c] <= 0.5) continue;
      score.push_back(sp[i * k + c]);
      label.push_back(lp[i * k + c]);
    }
    out.push_back(Auroc(score, label));
  }
  return out;
}

double MeanDefined(const std::vector<double>& values) {
  double sum = 0;
  int count = 0;
  for (double v : values) {
    if (std::isnan(v)) continue;
    sum += v;
    ++count;
  }
  return count ? sum / count : std::nan("");
}

StatusOr<torch::Tensor> AurocChart(const std::vector<double>& aurocs,
                                   const std::string& title) {
  outputs::BarChartOptions o;
  o.title = title;
  o.value_label = "AUROC";
  o.reference = 0.5;
  DDP_ASSIGN_OR_RETURN(outputs::RasterImage chart,
                       outputs::BarChart(CheXpertNames(), aurocs, o));
  return RasterToImage(chart);
}

}  // namespace ddprun::examples
