#pragma once

#include <torch/torch.h>

#include "ddprun/worker/conv3d.h"
#include "ddprun/worker/world.h"
#include "examples/frame/activation_checkpoint.h"
#include "examples/frame/norm_layer.h"

namespace ddprun::examples {

struct UNet3dOptions {
  int64_t in_channels = 4;  // noisy target + conditioning modalities
  int64_t out_channels = 1;
  int64_t width = 8;      // channels of the first level (second: 2x)
  int64_t time_dim = 64;  // sinusoidal time embedding size
  NormKind norm = NormKind::kGroup;
  worker::World world;  // for NormKind::kSyncBatch
  // Activation checkpointing of the four residual blocks (group norm only:
  // see CheckpointedForward's contract): their activations are recomputed in
  // the backward pass, under `recompute_autocast`, instead of kept.
  bool gradient_checkpointing = false;
  RecomputeAutocast recompute_autocast;
};

// Small 3D UNet for diffusion: residual blocks with group norm (or batch /
// sync batch norm, UNet3dOptions::norm) and SiLU, each
// adding a projection of the timestep embedding (sinusoidal -> MLP); two
// resolution levels joined by a skip connection. Spatial sizes must be even.
// Throws worker::ConfigError for gradient checkpointing with batch norm.
// forward(x [N,C,D,H,W], t [N] int64 timesteps) -> [N,out,D,H,W].
class UNet3dImpl : public torch::nn::Module {
 public:
  explicit UNet3dImpl(const UNet3dOptions& options);
  torch::Tensor forward(torch::Tensor x, torch::Tensor t);

 private:
  int64_t time_dim_;
  bool checkpoint_;
  RecomputeAutocast recompute_autocast_;
  torch::nn::Sequential time_mlp_{nullptr};
  worker::Conv3d conv_in_{nullptr}, down_{nullptr}, conv_out_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::AnyModule norm_out_;
};
TORCH_MODULE(UNet3d);

}  // namespace ddprun::examples
