#include "ddprun/worker/precision.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {

AutocastScope::AutocastScope(bool enabled, const std::string& device,
                             const std::string& dtype)
    : enabled_(enabled), cuda_(device == "cuda") {
  if (!enabled_) return;
  if (device != "cpu" && device != "cuda") {
    throw ConfigError("autocast device must be cpu or cuda, got " + device);
  }
  at::ScalarType type;
  if (dtype == "bf16") {
    type = at::kBFloat16;
  } else if (dtype == "fp16" && cuda_) {
    type = at::kHalf;
  } else {
    throw ConfigError("autocast dtype " + dtype + " is not supported on " +
                      device + " (cpu: bf16; cuda: fp16 or bf16)");
  }
  if (cuda_) {
    previous_enabled_ = at::autocast::is_enabled();
    at::autocast::set_autocast_gpu_dtype(type);
    at::autocast::set_enabled(true);
  } else {
    previous_enabled_ = at::autocast::is_cpu_enabled();
    at::autocast::set_autocast_cpu_dtype(type);
    at::autocast::set_cpu_enabled(true);
  }
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // Leaving the outermost scope drops the cast cache, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(previous_enabled_);
  } else {
    at::autocast::set_cpu_enabled(previous_enabled_);
  }
}

double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm) {
  return torch::nn::utils::clip_grad_norm_(params, max_norm);
}

double ScaleLearningRate(double base_lr, int world_size,
                         const std::string& rule) {
  if (rule == "linear") return base_lr * world_size;
  if (rule == "sqrt")
    return base_lr * std::sqrt(static_cast<double>(world_size));
  if (rule == "none") return base_lr;
  throw ConfigError("unknown LR scaling rule '" + rule +
                    "' (expected linear, sqrt or none)");
}

}  // namespace ddprun::worker
