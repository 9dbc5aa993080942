#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddprun/worker/world.h"

namespace ddprun::worker {

// Whether autocast on `device` computes in `dtype` (at::kBFloat16 or
// at::kHalf) with this LibTorch: CUDA float16, and bfloat16 on a GPU of
// compute capability >= 8.0; CPU bfloat16 always, float16 from LibTorch 2.2
// on (1.13's CPU autocast has bfloat16 only).
bool AutocastSupported(c10::Device device, at::ScalarType dtype);

// Mixed precision: autocast on the CPU or on CUDA (CUDA builds only).
// bf16 (matmul/conv in bf16, reductions in fp32) needs no loss scaling;
// fp16 needs a GradScaler. RAII: restores the previous autocast state (its
// flag and its dtype) on destruction. With enabled=false it does nothing.
class AutocastScope {
 public:
  // device: "cpu" or "cuda"; dtype: "bf16" or "fp16" (a ConfigError where
  // AutocastSupported says no, e.g. fp16 on the CPU of LibTorch 1.13).
  AutocastScope(bool enabled, const std::string& device = "cpu",
                const std::string& dtype = "bf16");
  // bf16 autocast on `device` (a World's device()): CPU or CUDA alike, and
  // no loss scaling needed. CUDA bf16 wants compute capability >= 8.0.
  AutocastScope(bool enabled, c10::Device device);
  // `dtype` (at::kBFloat16 or at::kHalf) autocast on `device`.
  AutocastScope(bool enabled, c10::Device device, at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool cuda_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

struct GradScalerOptions {
  bool enabled = true;
  // The gradients Unscale() sees are already equal on every rank (DDP
  // averaged them): the finite check needs no all-reduce.
  bool grads_synchronized = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's
// algorithm, device-agnostic):
//   ddp.Backward(scaler.Scale(loss));
//   if (scaler.Unscale(params)) { ClipGradNorm(...); opt.step(); }
//   scaler.Update();
// Unscale divides the gradients by the scale and reports whether they are
// all finite on every rank (collective: one all-reduce of a flag, so ranks
// always agree to step or skip; none with grads_synchronized). One host
// sync per call, not one per parameter. Update halves the scale after an
// overflow and doubles it after growth_interval clean steps. With enabled=false
// the scale is 1 and nothing is checked. bf16 needs no scaler.
class GradScaler {
 public:
  GradScaler(World world, GradScalerOptions options = {});
  at::Tensor Scale(const at::Tensor& loss) const;
  bool Unscale(const std::vector<at::Tensor>& params);
  void Update();
  double scale() const { return scale_; }

  // Where the dynamic scale stands between steps (restart scope "failed"
  // hands it to a replacement rank).
  struct State {
    double scale = 1;
    int64_t good_steps = 0;
  };
  State state() const { return {scale_, good_steps_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    good_steps_ = s.good_steps;
  }

 private:
  World world_;
  GradScalerOptions options_;
  double scale_;
  bool last_finite_ = true;
  int64_t good_steps_ = 0;
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
