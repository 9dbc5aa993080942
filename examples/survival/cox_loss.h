#pragma once

#include <torch/types.h>

namespace ddprun::examples {

// Negative Cox partial log-likelihood with Breslow's handling of ties,
// averaged over events:
//   -1/E * sum_{i: event_i} ( r_i - log sum_{j: t_j >= t_i} exp(r_j) )
// Tied times share one risk set (everyone still at risk at that time).
// risk, time, event: [N] (risk may be [N, 1]). Computed in float32 even
// under autocast. A batch without events returns 0 (still attached to the
// graph, so every parameter gets a zero gradient and DDP stays in step).
torch::Tensor CoxPartialLikelihoodLoss(const torch::Tensor& risk,
                                       const torch::Tensor& time,
                                       const torch::Tensor& event);

}  // namespace ddprun::examples
