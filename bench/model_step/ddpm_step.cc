// ddpm_trainer's defaults (ex::DdpmOptions{} and ex::DdpmTrainerDefaults():
// conditional 3D UNet width 8 with group norm, 4-channel volumes at the
// last default stage (16^3), batch 1 per GPU x 4 gradient accumulation
// steps = 4 samples per optimizer step, Fast-DDPM noising on its 10 uniform
// timesteps with x0-prediction, gradients clipped to norm 1.0, Adam lr
// 2e-3), its model, diffusion and optimizer and its loss (DdpmLoss, MSE;
// examples/ddpm/ddpm_model.h). Target modality 3 is noised, modalities 0-2
// condition.
#include "bench/model_step/model_step.h"
#include "examples/ddpm/ddpm_model.h"
#include "examples/ddpm/ddpm_options.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

class DdpmStep : public ModelStep {
 public:
  explicit DdpmStep(const StepConfig& config)
      : accumulation_(ex::DdpmTrainerDefaults().gradient_accumulation_steps),
        model_(ex::MakeDdpmModel(
            options_, ex::ParseNormKind(options_.norm, options_.sync_batchnorm))),
        precision_(config.precision, config.device),
        ddpm_(ex::DdpmDiffusionOptions(options_)) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = ex::MakeDdpmOptimizer(params_, options_);
    const int64_t size = options_.stages.back();
    const auto on = torch::TensorOptions().device(config.device);
    volumes_ = torch::randn(
        {options_.batch_size * accumulation_, 4, size, size, size}, on);
  }

  int64_t samples_per_step() const override {
    return options_.batch_size * accumulation_;
  }
  std::vector<torch::Tensor> batch() const override { return {volumes_}; }
  std::string batch_description() const override {
    return "volumes " + ShapeString(volumes_) + " as " +
           std::to_string(accumulation_) + " micro-batches of " +
           std::to_string(options_.batch_size);
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    optimizer_->zero_grad();
    const auto micro = volumes_.split(options_.batch_size);
    double total = 0;
    for (const torch::Tensor& m : micro) {
      torch::Tensor loss =
          ex::DdpmLoss(model_, ddpm_, m, options_.target_modality,
                       [&] { return precision_.Autocast(); }) /
          static_cast<double>(micro.size());
      total += loss.item<double>();
      precision_.Backward(loss);
    }
    precision_.Step(*optimizer_, params_, options_.clip_grad);
    return total;
  }

 private:
  const ex::DdpmOptions options_;
  const int64_t accumulation_;
  ex::UNet3d model_;
  StepPrecision precision_;
  ex::FastDdpm ddpm_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  torch::Tensor volumes_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeDdpmStep(const StepConfig& config) {
  return std::make_unique<DdpmStep>(config);
}

}  // namespace ddprun::bench
