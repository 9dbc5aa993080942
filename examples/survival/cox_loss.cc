#include "examples/survival/cox_loss.h"

#include <torch/torch.h>

namespace ddprun::examples {

torch::Tensor CoxPartialLikelihoodLoss(const torch::Tensor& risk,
                                       const torch::Tensor& time,
                                       const torch::Tensor& event) {
  torch::Tensor r = risk.reshape({-1}).to(torch::kFloat32);
  torch::Tensor t = time.reshape({-1}).to(r.device(), torch::kFloat32);
  torch::Tensor e = event.reshape({-1}).to(r.device(), torch::kFloat32);
  // No host reads (a GPU sync each): the event count and the tie groups
  // stay on the device. Without events the numerator is 0: the loss is 0.
  const torch::Tensor events = e.sum().clamp_min(1);
  // Descending time: the risk set of position k is positions 0..k, plus the
  // later positions tied with it. Take the log-cumsum at the last position
  // of each tie group: the smallest group end at or after k.
  torch::Tensor order = torch::argsort(t, /*dim=*/0, /*descending=*/true);
  torch::Tensor rs = r.index_select(0, order);
  torch::Tensor ts = t.index_select(0, order);
  torch::Tensor es = e.index_select(0, order);
  torch::Tensor log_cumsum = torch::logcumsumexp(rs, 0);
  const int64_t n = ts.size(0);
  if (n == 0) return r.sum() * 0.0;
  torch::Tensor position = torch::arange(
      n, torch::TensorOptions().dtype(torch::kInt64).device(r.device()));
  // Position k ends its group when k + 1 holds another time (or k is last).
  torch::Tensor ends = torch::ones({n}, position.options().dtype(torch::kBool));
  if (n > 1)
    ends.narrow(0, 0, n - 1)
        .copy_(ts.narrow(0, 0, n - 1) != ts.narrow(0, 1, n - 1));
  torch::Tensor end_at =
      torch::where(ends, position, torch::full_like(position, n));
  torch::Tensor group_end =
      std::get<0>(torch::cummin(end_at.flip({0}), 0)).flip({0});
  torch::Tensor log_risk_set = log_cumsum.index_select(0, group_end);
  return -((rs - log_risk_set) * es).sum() / events;
}

}  // namespace ddprun::examples
