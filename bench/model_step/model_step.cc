#include "bench/model_step/model_step.h"

#include <stdexcept>

namespace ddprun::bench {

const std::vector<std::string>& TrainerNames() {
  static const std::vector<std::string> kNames{"survival", "ddpm", "vqa",
                                               "segmentation"};
  return kNames;
}

std::unique_ptr<ModelStep> MakeModelStep(const std::string& trainer,
                                         const StepConfig& config) {
  if (trainer == "survival") return MakeSurvivalStep(config);
  if (trainer == "ddpm") return MakeDdpmStep(config);
  if (trainer == "vqa") return MakeVqaStep(config);
  if (trainer == "segmentation") return MakeSegmentationStep(config);
  throw std::invalid_argument("unknown trainer '" + trainer +
                              "' (survival, ddpm, vqa or segmentation)");
}

std::string ShapeString(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d)
    s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

}  // namespace ddprun::bench
