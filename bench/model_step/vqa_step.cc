// vqa_trainer's defaults (ex::VqaOptions{}: CNN width 16 with group norm +
// GRU (hidden 64) on 1 x 64^2 images and 12-token questions, batch 16 per
// rank, no accumulation, ZeRO off (plain Adam lr 2e-3)), its model,
// optimizer and loss (examples/vqa/vqa_step.h: answer cross-entropy +
// CheXpert BCE (label weight 1) summed over known labels / their count),
// over the synthetic data's vocabulary (14 words + padding + unknown = 16)
// and its 7 answers.
#include "bench/model_step/model_step.h"
#include "examples/vqa/vqa_options.h"
#include "examples/vqa/vqa_step.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

// The vocabulary and answers of --make_synthetic's questions.
constexpr int64_t kVocabulary = 16;
constexpr int64_t kAnswers = 7;
constexpr int64_t kLabels = ex::kCheXpertLabels;

class VqaStep : public ModelStep {
 public:
  explicit VqaStep(const StepConfig& config)
      : model_(ex::MakeVqaModel(
            options_, kVocabulary, kAnswers,
            ex::ParseNormKind(options_.norm, options_.sync_batchnorm))),
        precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = ex::MakeVqaOptimizer(options_, {}, params_).adam;
    const int64_t n = options_.guide.batch_size;
    const int64_t size = options_.image_size;
    const int64_t length = options_.question_length;
    const auto on = torch::TensorOptions().device(config.device);
    const auto int64 = on.dtype(torch::kInt64);
    images_ = torch::rand({n, 1, size, size}, on);
    // Questions of 5-8 words, padded with 0.
    tokens_ = torch::randint(2, kVocabulary, {n, length}, int64);
    torch::Tensor lengths = torch::randint(5, 9, {n, 1}, int64);
    tokens_.masked_fill_(torch::arange(length, int64).ge(lengths), 0);
    answers_ = torch::randint(0, kAnswers, {n}, int64);
    labels_ = torch::bernoulli(torch::full({n, kLabels}, 0.5, on));
    // ~10% uncertain labels, left out of the loss (--uncertain_policy
    // ignore).
    mask_ = torch::bernoulli(torch::full({n, kLabels}, 0.9, on));
  }

  int64_t samples_per_step() const override {
    return options_.guide.batch_size;
  }
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
    // One micro-batch (no accumulation): the trainer's step divides by 1.
    torch::Tensor loss = ex::VqaLoss(
        model_, {images_, tokens_, answers_, labels_, mask_},
        options_.label_weight, [&] { return precision_.Autocast(); },
        &answer_logits, &label_logits);
    const double value = loss.item<double>();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return value;
  }

 private:
  const ex::VqaOptions options_;
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
