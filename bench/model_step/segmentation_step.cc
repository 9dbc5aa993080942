// segmentation_trainer's defaults (examples/segmentation/
// segmentation_main.cc): prompt UNet width 8 on 1 x 64^2 images, prompts
// of 12 tokens over the synthetic data's vocabulary (13 words + padding +
// unknown = 15), batch 8 per rank, Dice + BCE (dice weight 1), Adam lr 1e-3
// (the base rate; one rank, so no scaling).
#include "bench/model_step/model_step.h"
#include "examples/segmentation/prompt_unet.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

constexpr int64_t kBatch = 8;
constexpr int64_t kSize = 64;
constexpr int64_t kPromptLength = 12;
constexpr int64_t kVocabulary = 15;
constexpr double kDiceWeight = 1.0;

ex::PromptUNetOptions ModelOptions() {
  ex::PromptUNetOptions o;
  o.vocab_size = kVocabulary;
  return o;
}

// The trainer's DiceBceLoss (segmentation_main.cc, not in its library):
// BCE on logits + (1 - soft Dice), in fp32.
torch::Tensor DiceBceLoss(const torch::Tensor& logits,
                          const torch::Tensor& target) {
  torch::Tensor l = logits.to(torch::kFloat32);
  torch::Tensor bce = torch::binary_cross_entropy_with_logits(l, target);
  torch::Tensor p = torch::sigmoid(l);
  torch::Tensor inter = (p * target).sum({1, 2, 3});
  torch::Tensor total = p.sum({1, 2, 3}) + target.sum({1, 2, 3});
  torch::Tensor dice = (2 * inter + 1) / (total + 1);
  return bce + kDiceWeight * (1 - dice).mean();
}

class SegmentationStep : public ModelStep {
 public:
  explicit SegmentationStep(const StepConfig& config)
      : model_(ModelOptions()), precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(1e-3));
    const auto on = torch::TensorOptions().device(config.device);
    images_ = torch::rand({kBatch, 1, kSize, kSize}, on);
    masks_ = torch::bernoulli(torch::full({kBatch, 1, kSize, kSize}, 0.1, on));
    // Prompts of 4-7 words, padded with 0 to the prompt length.
    tokens_ = torch::randint(2, kVocabulary, {kBatch, kPromptLength},
                             on.dtype(torch::kInt64));
    torch::Tensor lengths =
        torch::randint(4, 8, {kBatch, 1}, on.dtype(torch::kInt64));
    tokens_.masked_fill_(
        torch::arange(kPromptLength, on.dtype(torch::kInt64)).ge(lengths), 0);
  }

  int64_t samples_per_step() const override { return kBatch; }
  std::vector<torch::Tensor> batch() const override {
    return {images_, masks_, tokens_};
  }
  std::string batch_description() const override {
    return "images/masks " + ShapeString(images_) + ", tokens " +
           ShapeString(tokens_);
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    torch::Tensor logits;
    {
      auto autocast = precision_.Autocast();
      logits = model_->forward(images_, tokens_);
    }
    torch::Tensor loss = DiceBceLoss(logits, masks_);
    optimizer_->zero_grad();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return loss.item<double>();
  }

 private:
  ex::PromptUNet model_;
  StepPrecision precision_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  torch::Tensor images_, masks_, tokens_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeSegmentationStep(const StepConfig& config) {
  return std::make_unique<SegmentationStep>(config);
}

}  // namespace ddprun::bench
