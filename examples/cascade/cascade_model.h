#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "examples/cascade/cascade_config.h"
#include "examples/frame/activation_checkpoint.h"

namespace ddprun::examples {

// The X-ray side of a stage (xray_config).
struct XrayOptions {
  int64_t img_size = 32;   // views are resized to img_size^2
  int64_t num_views = 2;   // 1 (frontal) or 2 (frontal + lateral)
  int64_t patch_size = 4;  // view pixels per patch edge
};

struct StageModelOptions {
  StageConfig stage;
  XrayOptions xray;
  // Stages after the first also take the previous stage's output,
  // upsampled to this stage's size, as a second input channel.
  bool conditioned_on_previous = false;
  bool gradient_checkpointing = false;
  // The autocast of training forwards, for the recomputation in backward.
  RecomputeAutocast recompute;
};

// One transformer block with adaptive layer norm (DiT's adaLN): the
// conditioning vector sets a shift, scale and gate for each half
// (self-attention over all voxel tokens, then an MLP).
class VitBlockImpl : public torch::nn::Module {
 public:
  VitBlockImpl(int64_t dim, int64_t heads);
  // x [B, N, dim], cond [B, dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cond);

 private:
  int64_t heads_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr},
      modulation_{nullptr};
};
TORCH_MODULE(VitBlock);

// One stage: the X-ray encoder (a patch embedding per view) whose features
// are lifted into the volume along each view's beam (a voxel gets the
// features of the pixels whose rays cross it), the voxel-patch embedding
// of the noisy volume (and of the previous stage's output), learned
// positions, `vit_depth` blocks conditioned on the timestep and the pooled
// X-ray features, and a linear head back to voxel patches.
class CascadeStageImpl : public torch::nn::Module {
 public:
  explicit CascadeStageImpl(const StageModelOptions& options);
  // x_t [B, 1, D, H, W], t [B] (int64 timesteps), views [B, V, S, S] in
  // [0, 1], previous [B, 1, D, H, W] (undefined for the first stage).
  // Returns [B, 1, D, H, W]: v or eps.
  torch::Tensor forward(const torch::Tensor& x_t, const torch::Tensor& t,
                        const torch::Tensor& views,
                        const torch::Tensor& previous);
  const StageModelOptions& options() const { return options_; }
  void set_gradient_checkpointing(bool on) {
    options_.gradient_checkpointing = on;
  }

 private:
  torch::Tensor LiftViews(const torch::Tensor& views, torch::Tensor* pooled);
  torch::Tensor TimeEmbedding(const torch::Tensor& t) const;

  StageModelOptions options_;
  std::vector<int64_t> grid_;  // tokens per axis
  int64_t dim_;
  torch::nn::Conv3d patch_embed_{nullptr};
  torch::Tensor positions_;
  torch::nn::ModuleList view_embed_{nullptr};
  torch::nn::Sequential time_mlp_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear final_modulation_{nullptr}, head_{nullptr};
};
TORCH_MODULE(CascadeStage);

// Every stage of the cascade (one checkpoint holds them all; training
// updates one stage at a time).
class CascadeModelImpl : public torch::nn::Module {
 public:
  CascadeModelImpl(const std::vector<StageConfig>& stages,
                   const XrayOptions& xray, bool gradient_checkpointing,
                   const RecomputeAutocast& recompute);
  CascadeStage& stage(size_t k) { return stages_.at(k); }
  size_t num_stages() const { return stages_.size(); }

 private:
  std::vector<CascadeStage> stages_;
};
TORCH_MODULE(CascadeModel);

}  // namespace ddprun::examples
