// ddpm_trainer's defaults (examples/ddpm/ddpm_main.cc): conditional 3D UNet
// width 8 with group norm, 4-channel volumes at the last default stage
// (16^3), batch 1 per GPU x 4 gradient accumulation steps = 4 samples per
// optimizer step, Fast-DDPM noising on its 10 uniform timesteps with
// x0-prediction, MSE, gradients clipped to norm 1.0, Adam lr 2e-3. Target
// modality 3 is noised, modalities 0-2 condition.
#include "bench/model_step/model_step.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"

namespace ddprun::bench {
namespace {

namespace ex = ddprun::examples;

constexpr int64_t kMicroBatch = 1;
constexpr int64_t kAccumulation = 4;
constexpr int64_t kSize = 16;
constexpr int64_t kTarget = 3;
constexpr double kClipGrad = 1.0;

class DdpmStep : public ModelStep {
 public:
  explicit DdpmStep(const StepConfig& config)
      : model_(ex::UNet3dOptions{}),
        precision_(config.precision, config.device),
        ddpm_(ex::FastDdpmOptions{/*steps=*/10, /*total_steps=*/1000,
                                  /*beta_start=*/1e-4, /*beta_end=*/0.02,
                                  ex::TimestepSchedule::kUniform,
                                  ex::Prediction::kX0}) {
    model_->to(config.device);
    params_ = model_->parameters();
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(2e-3));
    const auto on = torch::TensorOptions().device(config.device);
    volumes_ =
        torch::randn({kMicroBatch * kAccumulation, 4, kSize, kSize, kSize}, on);
    // As SplitTarget (ddpm_validation.cc): the index on the device.
    conditions_ = torch::tensor({0, 1, 2}, on.dtype(torch::kInt64));
  }

  int64_t samples_per_step() const override {
    return kMicroBatch * kAccumulation;
  }
  std::vector<torch::Tensor> batch() const override { return {volumes_}; }
  std::string batch_description() const override {
    return "volumes " + ShapeString(volumes_) + " as 4 micro-batches of 1";
  }
  torch::nn::Module& model() override { return *model_; }

  double Step() override {
    model_->train();
    optimizer_->zero_grad();
    const auto micro = volumes_.split(kMicroBatch);
    double total = 0;
    for (const torch::Tensor& m : micro) {
      torch::Tensor target = m.narrow(1, kTarget, 1);
      torch::Tensor cond = m.index_select(1, conditions_);
      ex::FastDdpm::Noised noised = ddpm_.AddNoise(target);
      torch::Tensor out;
      {
        auto autocast = precision_.Autocast();
        out = model_->forward(torch::cat({noised.x_t, cond}, 1), noised.t);
      }
      torch::Tensor loss =
          torch::mse_loss(out.to(torch::kFloat32), noised.target) /
          static_cast<double>(micro.size());
      total += loss.item<double>();
      precision_.Backward(loss);
    }
    precision_.Step(*optimizer_, params_, kClipGrad);
    return total;
  }

 private:
  ex::UNet3d model_;
  StepPrecision precision_;
  ex::FastDdpm ddpm_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  torch::Tensor volumes_, conditions_;
};

}  // namespace

std::unique_ptr<ModelStep> MakeDdpmStep(const StepConfig& config) {
  return std::make_unique<DdpmStep>(config);
}

}  // namespace ddprun::bench
