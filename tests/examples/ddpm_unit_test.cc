// ddpm's library (examples/ddpm) in-process: the Fast-DDPM schedules and
// parameterisations, activation checkpointing (same loss and gradients as
// without, also under bf16 autocast), bf16 autocast through group norm, the
// target/condition split and the sample picture.
#include <cmath>

#include <torch/torch.h>

#include "ddprun_catch.h"

#include "ddprun/worker/precision.h"
#include "examples/ddpm/checkpointed_call.h"
#include "examples/ddpm/ddpm_validation.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"

namespace ddprun::examples {
namespace {

TEST_CASE("ddpm: Fast-DDPM's uniform and non-uniform timesteps",
          "[ddpm][unit]") {
  FastDdpmOptions o;
  CHECK(FastDdpm(o).timesteps() ==
        std::vector<int64_t>{0, 99, 199, 299, 399, 499, 599, 699, 799, 899});
  o.schedule = TimestepSchedule::kNonUniform;
  CHECK(FastDdpm(o).timesteps() ==
        std::vector<int64_t>{0, 199, 399, 599, 699, 799, 849, 899, 949, 999});
  o.steps = 5;  // 40% below 0.7 T, 60% from there to T - 1
  CHECK(FastDdpm(o).timesteps() == std::vector<int64_t>{0, 350, 699, 849, 999});
  o.steps = 1;
  CHECK(FastDdpm(o).timesteps() == std::vector<int64_t>{0});
  o.steps = 1001;
  CHECK_THROWS_WITH(FastDdpm(o), Catch::Contains("--timesteps"));
}

TEST_CASE("ddpm: each parameterisation's target gives back x0 and the noise",
          "[ddpm][unit]") {
  torch::manual_seed(3);
  const torch::Tensor x0 = torch::rand({2, 1, 4, 4, 4}) * 2 - 1;
  const torch::Tensor eps = torch::randn_like(x0);
  for (Prediction p : {Prediction::kEps, Prediction::kV, Prediction::kX0}) {
    FastDdpmOptions o;
    o.prediction = p;
    const FastDdpm ddpm(o);
    for (int64_t t : {99, 499, 899}) {
      INFO(PredictionName(p) << " t=" << t);
      const double ab = ddpm.alpha_bar(t);
      const torch::Tensor x_t = ddpm.Noise(x0, t, eps);
      const torch::Tensor target =
          p == Prediction::kEps ? eps
          : p == Prediction::kV ? std::sqrt(ab) * eps - std::sqrt(1 - ab) * x0
                                : x0;
      auto [x0_hat, eps_hat] = ddpm.Estimate(x_t, t, target);
      CHECK(torch::allclose(x0_hat, x0, 1e-3, 1e-3));
      CHECK(torch::allclose(eps_hat, eps, 1e-3, 1e-3));
    }
  }
  CHECK(ParsePrediction("x0") == Prediction::kX0);
  CHECK_THROWS_WITH(ParsePrediction("sample"), Catch::Contains("eps, v or x0"));
}

// Loss and gradients of one UNet step on fixed data, with or without
// checkpointing, optionally under bf16 autocast.
struct StepResult {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};
StepResult UNetStep(bool checkpoint, bool bf16) {
  torch::manual_seed(11);
  UNet3dOptions o;
  o.width = 4;
  o.gradient_checkpointing = checkpoint;
  o.recompute_autocast = {bf16, c10::Device(c10::kCPU), at::kBFloat16};
  UNet3d model(o);
  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({2, 4, 8, 8, 8});
  const torch::Tensor target = torch::randn({2, 1, 8, 8, 8});
  const torch::Tensor t = torch::tensor({99, 799}, torch::kInt64);
  torch::Tensor out;
  {
    worker::AutocastScope autocast(bf16, c10::Device(c10::kCPU));
    out = model->forward(x, t);
  }
  torch::Tensor loss = torch::mse_loss(out.to(torch::kFloat32), target);
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

TEST_CASE(
    "ddpm: gradient checkpointing gives the loss and gradients of the plain "
    "UNet (fp32 and bf16 autocast)",
    "[ddpm][unit][checkpointing]") {
  for (bool bf16 : {false, true}) {
    INFO("bf16 " << bf16);
    const StepResult plain = UNetStep(false, bf16);
    const StepResult checkpointed = UNetStep(true, bf16);
    CHECK(checkpointed.loss == Approx(plain.loss).epsilon(1e-6));
    REQUIRE(checkpointed.grads.size() == plain.grads.size());
    double max_diff = 0, max_grad = 0;
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      REQUIRE(checkpointed.grads[i].defined());
      max_diff = std::max(
          max_diff,
          (checkpointed.grads[i] - plain.grads[i]).abs().max().item<double>());
      max_grad = std::max(max_grad, plain.grads[i].abs().max().item<double>());
    }
    INFO("max |grad| " << max_grad << ", max difference " << max_diff);
    CHECK(max_grad > 1e-3);
    CHECK(max_diff <= 1e-6 * std::max(1.0, max_grad));
  }
}

TEST_CASE("ddpm: CheckpointedCall recomputes with gradients for its inputs",
          "[ddpm][unit][checkpointing]") {
  torch::Tensor w = torch::randn({3}, torch::requires_grad());
  torch::Tensor x = torch::randn({3}, torch::requires_grad());
  int calls = 0;
  auto fn = [&](const std::vector<torch::Tensor>& in) {
    ++calls;
    return std::vector<torch::Tensor>{(in[0] * w).sin().sum()};
  };
  torch::Tensor y = CheckpointedCall(fn, {x}, {})[0];
  CHECK(calls == 1);
  y.backward();
  CHECK(calls == 2);  // recomputed in the backward pass
  const torch::Tensor expected_x = (x * w).cos() * w;
  const torch::Tensor expected_w = (x * w).cos() * x;
  CHECK(torch::allclose(x.grad(), expected_x.detach()));
  CHECK(torch::allclose(w.grad(), expected_w.detach()));
  // Without an input that needs a gradient it is a plain call.
  torch::NoGradGuard no_grad;
  CheckpointedCall(fn, {x}, {});
  CHECK(calls == 3);
}

TEST_CASE("ddpm: gradient checkpointing refuses batch norm",
          "[ddpm][unit][checkpointing]") {
  UNet3dOptions o;
  o.norm = NormKind::kBatch;
  o.gradient_checkpointing = true;
  CHECK_THROWS_WITH(UNet3d(o), Catch::Contains("needs --norm group"));
}

TEST_CASE("ddpm: the UNet trains under bf16 autocast with group norm",
          "[ddpm][unit][amp]") {
  // Torch 1.13's CPU group_norm refused bf16 input with float32 weights.
  const StepResult r = UNetStep(false, true);
  CHECK(std::isfinite(r.loss));
  for (const auto& g : r.grads) CHECK(g.isfinite().all().item<bool>());
}

TEST_CASE("ddpm: SplitTarget keeps the channel order, SamplePanel the layout",
          "[ddpm][unit]") {
  const torch::Tensor v = torch::arange(4, torch::kFloat32)
                              .view({1, 4, 1, 1, 1})
                              .expand({1, 4, 4, 4, 4})
                              .contiguous();
  auto [target, cond] = SplitTarget(v, 1);
  CHECK(target.sizes() == torch::IntArrayRef({1, 1, 4, 4, 4}));
  CHECK(target.max().item<float>() == 1);
  CHECK(cond.select(1, 0).max().item<float>() == 0);
  CHECK(cond.select(1, 1).max().item<float>() == 2);
  CHECK(cond.select(1, 2).max().item<float>() == 3);

  const torch::Tensor panel = SamplePanel(
      {{v, torch::zeros({1, 1, 4, 4, 4})}, {v, torch::ones({1, 1, 4, 4, 4})}},
      3, "samples");
  // 5 tiles (3 conditions, sample, truth) per row, 2 rows; RGB, and gray
  // (the channels equal) since no overlay colours it.
  REQUIRE(panel.dim() == 3);
  REQUIRE(panel.size(0) == 3);
  CHECK(torch::equal(panel[0], panel[1]));
  CHECK(torch::equal(panel[0], panel[2]));
  CHECK(panel.size(2) >= 5 * 128);
  CHECK(panel.size(1) >= 2 * 128);
  CHECK(panel.min().item<float>() >= 0);
  CHECK(panel.max().item<float>() <= 1);
}

}  // namespace
}  // namespace ddprun::examples
