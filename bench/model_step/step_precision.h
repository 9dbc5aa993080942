#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddprun/worker/precision.h"

namespace ddprun::bench {

// --precision of bench/model_step, with the worker runtime's pieces the
// trainers use (worker/include/ddprun/worker/precision.h):
//  - fp32: no autocast, no loss scaling;
//  - bf16: bf16 autocast on the device over the forward pass;
//  - fp16: fp16 autocast + dynamic loss scaling (worker::GradScaler, whose
//    algorithm is torch.cuda.amp.GradScaler's). CUDA only.
// twins.py does the same with torch.autocast and torch.cuda.amp.GradScaler.
class StepPrecision {
 public:
  // Throws std::invalid_argument for a name other than fp32, bf16, fp16,
  // or fp16 on a CPU device.
  StepPrecision(const std::string& name, torch::Device device);

  const std::string& name() const { return name_; }
  // Autocast for the forward pass (inactive under fp32). Non-movable; C++17
  // returns it in place: `auto scope = precision.Autocast();`.
  worker::AutocastScope Autocast() const;
  // loss.backward(), on the scaled loss under fp16.
  void Backward(const torch::Tensor& loss) const;
  // The optimizer step after Backward, as the trainers and
  // torch.cuda.amp.GradScaler.step do it: under fp16 the gradients of
  // `params` are unscaled and the step is skipped when one is not finite;
  // with clip > 0 they are clipped to that global norm first (ddpm); then
  // the scale is updated.
  void Step(torch::optim::Optimizer& optimizer,
            const std::vector<torch::Tensor>& params, double clip = 0);

 private:
  std::string name_;
  torch::Device device_;
  worker::GradScaler scaler_;
};

}  // namespace ddprun::bench
