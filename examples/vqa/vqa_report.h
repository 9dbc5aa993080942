#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// AUROC of each column of `scores` against `labels` ([N, K]), leaving out
// entries whose `mask` is 0; NaN for a column with one class only (Auroc).
std::vector<double> LabelAurocs(const torch::Tensor& scores,
                                const torch::Tensor& labels,
                                const torch::Tensor& mask);

// The mean of the defined (non-NaN) values, NaN when there is none: the
// same number as MeanAuroc over the same columns.
double MeanDefined(const std::vector<double>& values);

// The per-label AUROC bar chart (outputs::BarChart, one bar per CheXpert
// finding, "n/a" for an undefined one, a dashed line at chance 0.5) as a
// [3, H, W] float tensor in [0, 1] for TrainerSession::EmitImage.
StatusOr<torch::Tensor> AurocChart(const std::vector<double>& aurocs,
                                   const std::string& title);

}  // namespace ddprun::examples
