#include "examples/segmentation/segmentation_model.h"

#include <utility>

namespace ddprun::examples {

PromptUNet MakeSegmentationModel(const SegOptions& opt, int64_t vocab_size) {
  PromptUNetOptions model_options;
  model_options.vocab_size = vocab_size;
  model_options.width = opt.width;
  return PromptUNet(model_options);
}

std::unique_ptr<torch::optim::Adam> MakeSegmentationOptimizer(
    std::vector<torch::Tensor> params, double lr) {
  return std::make_unique<torch::optim::Adam>(std::move(params),
                                              torch::optim::AdamOptions(lr));
}

torch::Tensor DiceBceLoss(const torch::Tensor& logits,
                          const torch::Tensor& target, double dice_weight) {
  torch::Tensor l = logits.to(torch::kFloat32);
  torch::Tensor bce = torch::binary_cross_entropy_with_logits(l, target);
  torch::Tensor p = torch::sigmoid(l);
  torch::Tensor inter = (p * target).sum({1, 2, 3});
  torch::Tensor total = p.sum({1, 2, 3}) + target.sum({1, 2, 3});
  torch::Tensor dice = (2 * inter + 1) / (total + 1);
  return bce + dice_weight * (1 - dice).mean();
}

}  // namespace ddprun::examples
