// survival_trainer's defaults (examples/survival/survival_main.cc): 3D
// ResNet-10, stem width 8, 1 x 32^3 volumes, batch 8 (the total; one rank
// trains on all 8), Cox partial likelihood, Adam lr 2e-3, weight decay 1e-4.
#include "bench/model_step/model_step.h"
#include "examples/survival/cox_loss.h"
#include "examples/survival/resnet3d.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

constexpr int64_t kBatch = 8;
constexpr int64_t kSize = 32;

class SurvivalStep : public ModelStep {
 public:
  explicit SurvivalStep(const StepConfig& config)
      : model_(ex::ResNet3dOptions{}),
        precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(2e-3).weight_decay(1e-4));
    const auto on = torch::TensorOptions().device(config.device);
    images_ = torch::randn({kBatch, 1, kSize, kSize, kSize}, on);
    time_ = torch::rand({kBatch}, on) * 10 + 0.1;
    // ~30% censored, as the synthetic data.
    event_ = torch::bernoulli(torch::full({kBatch}, 0.7, on));
  }

  int64_t samples_per_step() const override { return kBatch; }
  std::vector<torch::Tensor> batch() const override {
    return {images_, time_, event_};
  }
  std::string batch_description() const override {
    return "images " + ShapeString(images_) + ", time/event [8]";
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    torch::Tensor risk;
    {
      auto autocast = precision_.Autocast();
      risk = model_->forward(images_);
    }
    torch::Tensor loss = ex::CoxPartialLikelihoodLoss(risk, time_, event_);
    optimizer_->zero_grad();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return loss.item<double>();
  }

 private:
  ex::ResNet3d model_;
  StepPrecision precision_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  torch::Tensor images_, time_, event_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeSurvivalStep(const StepConfig& config) {
  return std::make_unique<SurvivalStep>(config);
}

}  // namespace ddprun::bench
