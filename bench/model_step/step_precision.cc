#include "bench/model_step/step_precision.h"

#include <stdexcept>

namespace ddprun::bench {
namespace {

std::string Checked(const std::string& name, const torch::Device& device) {
  if (name != "fp32" && name != "bf16" && name != "fp16") {
    throw std::invalid_argument(
        "--precision must be fp32, bf16 or fp16, got '" + name + "'");
  }
  if (name == "fp16" && !device.is_cuda()) {
    throw std::invalid_argument(
        "--precision fp16 needs --device cuda (CPU autocast is bf16 only)");
  }
  return name;
}

worker::GradScalerOptions ScalerOptions(const std::string& name) {
  worker::GradScalerOptions o;
  o.enabled = name == "fp16";
  return o;
}

}  // namespace

StepPrecision::StepPrecision(const std::string& name, torch::Device device)
    : name_(Checked(name, device)),
      device_(device),
      scaler_(worker::World(), ScalerOptions(name)) {}

worker::AutocastScope StepPrecision::Autocast() const {
  return worker::AutocastScope(name_ != "fp32",
                               device_.is_cuda() ? "cuda" : "cpu",
                               name_ == "fp16" ? "fp16" : "bf16");
}

void StepPrecision::Backward(const torch::Tensor& loss) const {
  scaler_.Scale(loss).backward();
}

void StepPrecision::Step(torch::optim::Optimizer& optimizer,
                         const std::vector<torch::Tensor>& params,
                         double clip) {
  if (scaler_.Unscale(params)) {
    if (clip > 0) worker::ClipGradNorm(params, clip);
    optimizer.step();
  }
  scaler_.Update();
}

}  // namespace ddprun::bench
