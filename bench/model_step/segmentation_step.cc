// segmentation_trainer's defaults (ex::SegOptions{}: prompt UNet width 8
// on 1 x 64^2 images, prompts of 12 tokens, batch 8 per rank, dice weight
// 1, Adam lr 1e-3 (the base rate; one rank, so no scaling)), its model,
// optimizer and loss (examples/segmentation/segmentation_model.h: Dice +
// BCE), over the synthetic data's vocabulary (13 words + padding + unknown
// = 15).
#include "bench/model_step/model_step.h"
#include "examples/segmentation/segmentation_model.h"
#include "examples/segmentation/segmentation_options.h"
#include "examples/segmentation/segmentation_step.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

// The vocabulary of --make_synthetic's prompts.
constexpr int64_t kVocabulary = 15;

class SegmentationStep : public ModelStep {
 public:
  explicit SegmentationStep(const StepConfig& config)
      : model_(ex::MakeSegmentationModel(options_, kVocabulary)),
        precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = ex::MakeSegmentationOptimizer(params_, options_.learning_rate);
    const int64_t n = options_.batch_size;
    const int64_t size = options_.image_size;
    const int64_t length = options_.prompt_length;
    const auto on = torch::TensorOptions().device(config.device);
    images_ = torch::rand({n, 1, size, size}, on);
    masks_ = torch::bernoulli(torch::full({n, 1, size, size}, 0.1, on));
    // Prompts of 4-7 words, padded with 0 to the prompt length.
    tokens_ = torch::randint(2, kVocabulary, {n, length},
                             on.dtype(torch::kInt64));
    torch::Tensor lengths =
        torch::randint(4, 8, {n, 1}, on.dtype(torch::kInt64));
    tokens_.masked_fill_(
        torch::arange(length, on.dtype(torch::kInt64)).ge(lengths), 0);
  }

  int64_t samples_per_step() const override { return options_.batch_size; }
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
    torch::Tensor loss = ex::SegmentationLoss(
        model_, {images_, masks_, tokens_}, options_.dice_weight,
        [&] { return precision_.Autocast(); });
    optimizer_->zero_grad();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return loss.item<double>();
  }

 private:
  const ex::SegOptions options_;
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
