// survival_trainer's defaults (ex::SurvivalOptions{}: 3D ResNet-10, stem
// width 8, 1 x 32^3 volumes, batch 8 (the total; one rank trains on all
// 8), Adam lr 2e-3, weight decay 1e-4), its model and optimizer
// (survival_model.h) and its loss (SurvivalLoss, the Cox partial
// likelihood).
#include "bench/model_step/model_step.h"
#include "examples/survival/survival_model.h"
#include "examples/survival/survival_options.h"
#include "examples/survival/survival_step.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

class SurvivalStep : public ModelStep {
 public:
  explicit SurvivalStep(const StepConfig& config)
      : model_(ex::MakeSurvivalModel(options_)),
        precision_(config.precision, config.device) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = ex::MakeSurvivalOptimizer(params_, options_);
    const int64_t n = options_.batch_size;
    const std::vector<int64_t>& size = options_.image_size;
    const auto on = torch::TensorOptions().device(config.device);
    batch_.images = torch::randn({n, 1, size[0], size[1], size[2]}, on);
    batch_.time = torch::rand({n}, on) * 10 + 0.1;
    // ~30% censored, as the synthetic data.
    batch_.event = torch::bernoulli(torch::full({n}, 0.7, on));
  }

  int64_t samples_per_step() const override { return options_.batch_size; }
  std::vector<torch::Tensor> batch() const override {
    return {batch_.images, batch_.time, batch_.event};
  }
  std::string batch_description() const override {
    return "images " + ShapeString(batch_.images) + ", time/event " +
           ShapeString(batch_.time);
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    torch::Tensor loss =
        ex::SurvivalLoss(model_, batch_, [&] { return precision_.Autocast(); });
    optimizer_->zero_grad();
    precision_.Backward(loss);
    precision_.Step(*optimizer_, params_);
    return loss.item<double>();
  }

 private:
  const ex::SurvivalOptions options_;
  ex::ResNet3d model_;
  StepPrecision precision_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  ex::SurvivalBatch batch_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeSurvivalStep(const StepConfig& config) {
  return std::make_unique<SurvivalStep>(config);
}

}  // namespace ddprun::bench
