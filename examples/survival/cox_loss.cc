#include "examples/survival/cox_loss.h"

#include <torch/torch.h>

namespace ddprun::examples {

torch::Tensor CoxPartialLikelihoodLoss(const torch::Tensor& risk,
                                       const torch::Tensor& time,
                                       const torch::Tensor& event) {
  torch::Tensor r = risk.reshape({-1}).to(torch::kFloat32);
  torch::Tensor t = time.reshape({-1}).to(r.device(), torch::kFloat32);
  torch::Tensor e = event.reshape({-1}).to(r.device(), torch::kFloat32);
  const double events = e.sum().item<double>();
  if (events == 0) return r.sum() * 0.0;
  // Descending time: the risk set of position k is positions 0..k, plus the
  // later positions tied with it. Take the log-cumsum at the last position
  // of each tie group.
  torch::Tensor order = torch::argsort(t, /*dim=*/0, /*descending=*/true);
  torch::Tensor rs = r.index_select(0, order);
  torch::Tensor ts = t.index_select(0, order);
  torch::Tensor es = e.index_select(0, order);
  torch::Tensor log_cumsum = torch::logcumsumexp(rs, 0);
  const int64_t n = ts.size(0);
  std::vector<int64_t> group_end(n);
  torch::Tensor ts_cpu = ts.cpu();
  auto tacc = ts_cpu.accessor<float, 1>();
  for (int64_t k = n - 1; k >= 0; --k) {
    group_end[k] = (k + 1 < n && tacc[k] == tacc[k + 1]) ? group_end[k + 1] : k;
  }
  torch::Tensor idx = torch::tensor(group_end, torch::kInt64).to(r.device());
  torch::Tensor log_risk_set = log_cumsum.index_select(0, idx);
  return -((rs - log_risk_set) * es).sum() / events;
}

}  // namespace ddprun::examples
