#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "examples/frame/activation_checkpoint.h"

namespace ddprun::examples {

struct ResNet3dOptions {
  // "resnet10", "resnet18", "resnet34" (basic blocks) or "resnet50",
  // "resnet101", "resnet152" (bottlenecks), as MONAI's resnet family.
  std::string depth = "resnet10";
  // Channels of the stem; stages use width, 2w, 4w, 8w (64 in the paper;
  // small widths keep CPU runs fast).
  int64_t width = 8;
  int64_t in_channels = 1;
  int64_t num_outputs = 1;
  // Activation checkpointing (CheckpointedForward): in training, the stem
  // and each residual block keep only their input and recompute the rest
  // in backward, inside `recompute_scope` (the trainer's autocast). Same
  // outputs and gradients; the parameters and checkpoints are unchanged.
  bool gradient_checkpointing = false;
  RecomputeScope recompute_scope;
};

// 3D ResNet: 7^3 stride-2 stem, max-pool, four stages (the last three
// stride 2), global average pool, linear head. Batch norm throughout.
// Input [N, C, D, H, W]; output [N, num_outputs]. Throws std::invalid_argument
// for an unknown depth.
class ResNet3dImpl : public torch::nn::Module {
 public:
  explicit ResNet3dImpl(const ResNet3dOptions& options);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential stem_{nullptr};
  torch::nn::Sequential stages_{nullptr};
  torch::nn::Linear head_{nullptr};
  bool checkpointing_ = false;
  RecomputeScope recompute_scope_;
};
TORCH_MODULE(ResNet3d);

// The smallest batch ResNet3d trains on for inputs of `spatial` size
// ([D, H, W]): 2 when its deepest feature maps (1/32 of the input, rounded
// up) are a single voxel, since batch norm in training needs more than one
// value per channel; 1 otherwise.
int64_t ResNet3dMinTrainBatch(const std::vector<int64_t>& spatial);

// Names accepted by ResNet3dOptions::depth.
const std::vector<std::string>& ResNet3dDepths();

}  // namespace ddprun::examples
