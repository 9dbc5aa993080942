#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ddprun::worker {

// Mixed precision as far as Torch 1.13 allows.
// CPU: bfloat16 autocast (matmul/conv in bf16, reductions in fp32); no loss
// scaling needed. CUDA (CUDA builds only): fp16 or bf16 autocast. RAII:
// restores the previous autocast state on destruction. With enabled=false
// it does nothing.
class AutocastScope {
 public:
  // device: "cpu" or "cuda"; dtype: "bf16" or "fp16" (fp16 on CPU is a
  // ConfigError).
  AutocastScope(bool enabled, const std::string& device = "cpu",
                const std::string& dtype = "bf16");
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool cuda_;
  bool previous_enabled_ = false;
};

// Clips the global L2 norm of the gradients of `params` to `max_norm`
// (torch::nn::utils::clip_grad_norm_). Returns the norm before clipping.
// Call after DDP's Backward so every rank clips the same averaged gradients.
double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm);

// LR scaling by world size: "linear" (lr*world), "sqrt" (lr*sqrt(world)) or
// "none". Throws ConfigError for another rule.
double ScaleLearningRate(double base_lr, int world_size,
                         const std::string& rule = "linear");

}  // namespace ddprun::worker
