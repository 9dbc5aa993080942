#include "ddprun/worker/precision.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include "ddprun/worker/errors.h"
#include "torch_compat.h"

namespace ddprun::worker {

namespace {

at::ScalarType AutocastType(const std::string& dtype) {
  if (dtype == "bf16") return at::kBFloat16;
  if (dtype == "fp16") return at::kHalf;
  throw ConfigError("autocast dtype must be bf16 or fp16, got " + dtype);
}

c10::Device AutocastDevice(const std::string& device) {
  if (device == "cpu") return c10::Device(c10::kCPU);
  if (device == "cuda") return c10::Device(c10::kCUDA);
  throw ConfigError("autocast device must be cpu or cuda, got " + device);
}

}  // namespace

bool AutocastSupported(c10::Device device, at::ScalarType dtype) {
  return torch_compat::AutocastSupports(device.type(), dtype);
}

AutocastScope::AutocastScope(bool enabled, const std::string& device,
                             const std::string& dtype)
    : AutocastScope(enabled, AutocastDevice(device), AutocastType(dtype)) {}

AutocastScope::AutocastScope(bool enabled, c10::Device device)
    : AutocastScope(enabled, device, at::kBFloat16) {}

AutocastScope::AutocastScope(bool enabled, c10::Device device,
                             at::ScalarType dtype)
    : enabled_(enabled), cuda_(device.is_cuda()) {
  if (!enabled_) return;
  if (!AutocastSupported(device, dtype)) {
    throw ConfigError(std::string("autocast in ") + c10::toString(dtype) +
                      " is not supported on " +
                      c10::DeviceTypeName(device.type(), true) +
                      " by LibTorch " + torch_compat::TorchVersion() +
                      " (CPU float16 needs LibTorch >= 2.2, CUDA bfloat16 a "
                      "GPU of compute capability >= 8.0)");
  }
  const c10::DeviceType d = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  previous_enabled_ = torch_compat::AutocastEnabled(d);
  previous_dtype_ = torch_compat::AutocastDtype(d);
  torch_compat::SetAutocastDtype(d, dtype);
  torch_compat::SetAutocastEnabled(d, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // Leaving the outermost scope drops the cast cache, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  const c10::DeviceType d =
      cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  torch_compat::SetAutocastEnabled(d, previous_enabled_);
  torch_compat::SetAutocastDtype(d, previous_dtype_);
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
  // Count the non-finite gradients where they are; read the count once.
  at::Tensor bad;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    g.div_(scale_);
    at::Tensor here = at::isfinite(g).logical_not().any().to(at::kFloat);
    bad = bad.defined() ? bad.add_(here) : here.reshape({1});
  }
  if (!bad.defined()) bad = at::zeros({1}, at::kFloat);
  if (!options_.grads_synchronized && world_.distributed()) {
    bad = bad.to(world_.device());
    world_.AllReduce(bad, ReduceOp::kMax);
  }
  last_finite_ = bad.item<float>() == 0.0f;
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
