#include "examples/survival/resnet3d.h"

#include <stdexcept>

#include "ddprun/worker/conv3d.h"
#include "examples/frame/norm_layer.h"

namespace ddprun::examples {
namespace {

namespace nn = torch::nn;

// Batch norm with warm-started running statistics (see MakeNorm).
nn::AnyModule BatchNorm3d(int64_t channels) {
  return MakeNorm(NormKind::kBatch, channels, /*spatial_dims=*/3,
                  /*groups=*/1, worker::World());
}

// worker::Conv3d: a rank's last validation batch can be one volume (see
// conv3d.h).
worker::Conv3d Conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return worker::Conv3d(
      nn::Conv3dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// body(x) + shortcut(x), then relu. The shortcut is a strided 1x1 conv +
// batch norm when the shape changes, the identity otherwise.
class ResidualBlockImpl : public nn::Module {
 public:
  ResidualBlockImpl(nn::Sequential body, int64_t in, int64_t out,
                    int64_t stride) {
    body_ = register_module("body", body);
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut",
          nn::Sequential(Conv(in, out, 1, stride), BatchNorm3d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = shortcut_ ? shortcut_->forward(x) : x;
    return torch::relu(body_->forward(x) + identity);
  }

 private:
  nn::Sequential body_{nullptr};
  nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(ResidualBlock);

constexpr int64_t kBottleneckExpansion = 4;

// conv3-bn-relu-conv3-bn (resnet10/18/34).
nn::Sequential BasicBody(int64_t in, int64_t planes, int64_t stride) {
  return nn::Sequential(Conv(in, planes, 3, stride), BatchNorm3d(planes),
                        nn::ReLU(true), Conv(planes, planes, 3, 1),
                        BatchNorm3d(planes));
}

// 1x1 reduce, 3x3, 1x1 expand x4 (resnet50).
nn::Sequential BottleneckBody(int64_t in, int64_t planes, int64_t stride) {
  const int64_t out = planes * kBottleneckExpansion;
  return nn::Sequential(Conv(in, planes, 1, 1), BatchNorm3d(planes),
                        nn::ReLU(true), Conv(planes, planes, 3, stride),
                        BatchNorm3d(planes), nn::ReLU(true),
                        Conv(planes, out, 1, 1), BatchNorm3d(out));
}

std::vector<int64_t> BlocksPerStage(const std::string& depth) {
  if (depth == "resnet10") return {1, 1, 1, 1};
  if (depth == "resnet18") return {2, 2, 2, 2};
  if (depth == "resnet34" || depth == "resnet50") return {3, 4, 6, 3};
  if (depth == "resnet101") return {3, 4, 23, 3};
  if (depth == "resnet152") return {3, 8, 36, 3};
  throw std::invalid_argument(
      "unknown --resnet '" + depth +
      "' (resnet10, resnet18, resnet34, resnet50, resnet101, resnet152)");
}

}  // namespace

int64_t ResNet3dMinTrainBatch(const std::vector<int64_t>& spatial) {
  int64_t voxels = 1;
  for (int64_t size : spatial) {
    // The stem conv, the max-pool and the three strided stages each give
    // ceil(size / 2): (size + 2p - k) / 2 + 1 for their kernels and pads.
    for (int halvings = 0; halvings < 5; ++halvings) size = (size + 1) / 2;
    voxels *= size;
  }
  return voxels == 1 ? 2 : 1;
}

const std::vector<std::string>& ResNet3dDepths() {
  static const std::vector<std::string> kDepths{
      "resnet10", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"};
  return kDepths;
}

ResNet3dImpl::ResNet3dImpl(const ResNet3dOptions& options) {
  const std::vector<int64_t> blocks = BlocksPerStage(options.depth);
  const bool bottleneck = options.depth != "resnet10" &&
                          options.depth != "resnet18" &&
                          options.depth != "resnet34";
  const int64_t w = options.width;
  stem_ = register_module(
      "stem",
      nn::Sequential(
          Conv(options.in_channels, w, 7, 2), BatchNorm3d(w), nn::ReLU(true),
          nn::MaxPool3d(nn::MaxPool3dOptions(3).stride(2).padding(1))));
  stages_ = nn::Sequential();
  int64_t in = w;
  for (size_t s = 0; s < blocks.size(); ++s) {
    const int64_t planes = w << s;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const int64_t out = bottleneck ? planes * kBottleneckExpansion : planes;
      stages_->push_back(ResidualBlock(bottleneck
                                           ? BottleneckBody(in, planes, stride)
                                           : BasicBody(in, planes, stride),
                                       in, out, stride));
      in = out;
    }
  }
  register_module("stages", stages_);
  head_ = register_module("head", nn::Linear(in, options.num_outputs));
  checkpointing_ = options.gradient_checkpointing;
  recompute_scope_ = options.recompute_scope;
}

torch::Tensor ResNet3dImpl::forward(torch::Tensor x) {
  if (checkpointing_ && is_training()) {
    x = CheckpointedForward(
        *stem_, [this](const torch::Tensor& t) { return stem_->forward(t); }, x,
        recompute_scope_);
    for (auto& block : *stages_) {
      auto& b = block.get<ResidualBlockImpl>();
      x = CheckpointedForward(
          b, [&b](const torch::Tensor& t) { return b.forward(t); }, x,
          recompute_scope_);
    }
  } else {
    x = stages_->forward(stem_->forward(x));
  }
  x = torch::adaptive_avg_pool3d(x, {1, 1, 1}).flatten(1);
  return head_->forward(x);
}

}  // namespace ddprun::examples
