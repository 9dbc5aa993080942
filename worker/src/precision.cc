#include "ddprun/worker/precision.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include "ddprun/worker/errors.h"
#include "torch_compat.h"

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
  const c10::DeviceType d = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  previous_enabled_ = torch_compat::AutocastEnabled(d);
  torch_compat::SetAutocastDtype(d, type);
  torch_compat::SetAutocastEnabled(d, true);
  at::autocast::increment_nesting();
}

AutocastScope::AutocastScope(bool enabled, c10::Device device)
    : AutocastScope(enabled, device.is_cuda() ? "cuda" : "cpu", "bf16") {}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // Leaving the outermost scope drops the cast cache, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  torch_compat::SetAutocastEnabled(
      cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU, previous_enabled_);
}

GradScaler::GradScaler(World world, GradScalerOptions options)
    : world_(std::move(world)),
      options_(options),
      scale_(options.enabled ? options.init_scale : 1.0) {
  if (options_.init_scale <= 0 || options_.growth_factor < 1 ||
      options_.backoff_factor <= 0 || options_.backoff_factor >= 1 ||
      options_.growth_interval < 1) {
    throw ConfigError("GradScaler: invalid options");
  }
}

at::Tensor GradScaler::Scale(const at::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

bool GradScaler::Unscale(const std::vector<at::Tensor>& params) {
  if (!options_.enabled) return true;
  at::NoGradGuard no_grad;
  // One flag per gradient, read back once: an item() per gradient waits for
  // the device once per parameter tensor (dozens per step on CUDA), where
  // torch.cuda.amp.GradScaler waits once.
  std::vector<at::Tensor> finite_flags;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    g.div_(scale_);
    at::Tensor f = at::isfinite(g).all();
    if (!finite_flags.empty()) f = f.to(finite_flags.front().device());
    finite_flags.push_back(f);
  }
  const bool finite =
      finite_flags.empty() || at::stack(finite_flags).all().item<bool>();
  at::Tensor flag =
      at::tensor({finite ? 0.0f : 1.0f}, at::kFloat).to(world_.device());
  world_.AllReduce(flag, ReduceOp::kMax);
  last_finite_ = flag.item<float>() == 0.0f;
  return last_finite_;
}

void GradScaler::Update() {
  if (!options_.enabled) return;
  if (!last_finite_) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  last_finite_ = true;
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
