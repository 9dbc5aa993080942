// vqa_trainer's defaults (examples/vqa/vqa_main.cc): CNN width 16 with group
// norm + GRU (hidden 64) on 1 x 64^2 images and 12-token questions over the
// synthetic data's vocabulary (14 words + padding + unknown = 16) and its 7
// answers, batch 16 per rank, no accumulation, ZeRO off (plain Adam lr
// 2e-3). Loss: answer cross-entropy + CheXpert BCE (label weight 1) summed
// over known labels / their count.
#include "bench/model_step/model_step.h"
#include "examples/vqa/vqa_model.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

constexpr int64_t kBatch = 16;
constexpr int64_t kSize = 64;
constexpr int64_t kQuestionLength = 12;
constexpr int64_t kVocabulary = 16;
constexpr int64_t kAnswers = 7;
constexpr int64_t kLabels = 14;
constexpr double kLabelWeight = 1.0;
constexpr int64_t kMicroBatches = 1;

ex::VqaModelOptions ModelOptions() {
  ex::VqaModelOptions o;
  o.vocab_size = kVocabulary;
  o.num_answers = kAnswers;
  return o;
}

class VqaStep : public ModelStep {
 public:
  explicit VqaStep(const StepConfig& config)
      : model_(ModelOptions()), precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(2e-3));
    const auto on = torch::TensorOptions().device(config.device);
    const auto int64 = on.dtype(torch::kInt64);
    images_ = torch::rand({kBatch, 1, kSize, kSize}, on);
    // Questions of 5-8 words, padded with 0.
    tokens_ = torch::randint(2, kVocabulary, {kBatch, kQuestionLength}, int64);
    torch::Tensor lengths = torch::randint(5, 9, {kBatch, 1}, int64);
    tokens_.masked_fill_(torch::arange(kQuestionLength, int64).ge(lengths), 0);
    answers_ = torch::randint(0, kAnswers, {kBatch}, int64);
    labels_ = torch::bernoulli(torch::full({kBatch, kLabels}, 0.5, on));
    // ~10% uncertain labels, left out of the loss (--uncertain_policy
    // ignore).
    mask_ = torch::bernoulli(torch::full({kBatch, kLabels}, 0.9, on));
  }

  int64_t samples_per_step() const override { return kBatch; }
  std::vector<torch::Tensor> batch() const override {
    return {images_, tokens_, answers_, labels_, mask_};
  }
  std::string batch_description() const override {
    return "images " + ShapeString(images_) + ", tokens " +
           ShapeString(tokens_) + ", labels " + ShapeString(labels_);
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    optimizer_->zero_grad();
    torch::Tensor answer_logits, label_logits;
    {
      auto autocast = precision_.Autocast();
      std::tie(answer_logits, label_logits) = model_->forward(images_, tokens_);
    }
    torch::Tensor ce = torch::nn::functional::cross_entropy(
        answer_logits.to(torch::kFloat32), answers_,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
    torch::Tensor bce = torch::binary_cross_entropy_with_logits(
        label_logits.to(torch::kFloat32), labels_, mask_, {},
        at::Reduction::Sum);
    torch::Tensor loss =
        (ce + kLabelWeight * bce / mask_.sum().clamp_min(1.0)) /
        static_cast<double>(kMicroBatches);
    const double value = loss.item<double>();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return value;
  }

 private:
  ex::VqaModel model_;
  StepPrecision precision_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  torch::Tensor images_, tokens_, answers_, labels_, mask_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeVqaStep(const StepConfig& config) {
  return std::make_unique<VqaStep>(config);
}

}  // namespace ddprun::bench
