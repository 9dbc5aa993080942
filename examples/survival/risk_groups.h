#pragma once

#include <string>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// What the survival model produces, as a picture: the Kaplan-Meier curves
// of the validation subjects it calls low risk (blue) and high risk (red,
// HighRiskHalf: risk score above the median), censorings as ticks, each
// group's size and events in the legend and the log-rank p-value of the
// split in the title after `when` (e.g. "epoch 3"). A model that ranks
// subjects well separates the curves (the high-risk curve falls faster);
// one that does not leaves them on top of each other. Returns an RGB
// tensor [3, H, W] in [0, 1] for TrainerSession::EmitImage, or the
// plotting error (INVALID_ARGUMENT for inputs of different lengths or
// none).
StatusOr<torch::Tensor> RiskGroupsPicture(const std::vector<double>& risk,
                                          const std::vector<double>& time,
                                          const std::vector<double>& event,
                                          const std::string& when);

}  // namespace ddprun::examples
