// ddpm's library (examples/ddpm) in-process: the Fast-DDPM schedules and
// parameterisations, activation checkpointing (same loss and gradients as
// without, also under bf16 autocast), bf16 autocast through group norm, the
// target/condition split and the sample picture.
#include <atomic>
#include <cmath>
#include <cstring>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include "ddprun/worker/conv3d.h"
#include "ddprun/worker/cpu_convolution_check.h"
#include "ddprun/worker/precision.h"
#include "examples/ddpm/ddpm_validation.h"
#include "examples/ddpm/fast_ddpm.h"
#include "examples/ddpm/unet3d.h"
#include "examples/frame/activation_checkpoint.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {
namespace {

// Counts the ATen operators named `op` that run on this thread while it
// lives (CPU backward runs on the calling thread).
class OpCounter {
 public:
  explicit OpCounter(const char* op) {
    op_ = op;
    count_ = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                       -> std::unique_ptr<at::ObserverContext> {
          if (std::strcmp(fn.name(), op_) == 0) ++count_;
          return nullptr;
        }));
  }
  ~OpCounter() { at::removeCallback(handle_); }
  int count() const { return count_; }

 private:
  static inline const char* op_ = nullptr;
  static inline std::atomic<int> count_{0};
  at::CallbackHandle handle_;
};

constexpr const char* kSlowConv3d = "aten::slow_conv3d_forward";

// LibTorch picks its conv3d kernel by the number of intra-op threads too: the
// kernel-counting tests assume one, as every rank under ddprun has, whatever
// OMP_NUM_THREADS the test binary was started with.
class OneIntraOpThread {
 public:
  OneIntraOpThread() : before_(torch::get_num_threads()) {
    torch::set_num_threads(1);
  }
  ~OneIntraOpThread() { torch::set_num_threads(before_); }

 private:
  int before_;
};

TEST_CASE(
    "ddpm: each rank draws its own timesteps and noise, the same on a "
    "rerun",
    "[ddpm][unit]") {
  const FastDdpm ddpm{FastDdpmOptions()};
  const torch::Tensor x0 = torch::zeros({16, 1, 4, 4, 4});
  auto draw = [&](int rank) {
    SeedRank(7, rank);  // what InitTrainerWorld does on rank `rank`
    return ddpm.AddNoise(x0);
  };
  const FastDdpm::Noised rank0 = draw(0), rank1 = draw(1), again = draw(0);
  CHECK_FALSE(torch::equal(rank0.t, rank1.t));
  CHECK_FALSE(torch::equal(rank0.target, rank1.target));
  CHECK(torch::equal(rank0.t, again.t));
  CHECK(torch::equal(rank0.target, again.target));
  CHECK(torch::equal(rank0.x_t, again.x_t));
}

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

// A UNet of width 4 (seed 11) and a fixed batch for it (seed 12).
UNet3d SeededUNet(bool checkpoint, bool bf16) {
  torch::manual_seed(11);
  UNet3dOptions o;
  o.width = 4;
  o.gradient_checkpointing = checkpoint;
  o.recompute_autocast = {bf16, c10::Device(c10::kCPU), at::kBFloat16};
  return UNet3d(o);
}
struct FixedBatch {
  torch::Tensor x, target, t;
};
FixedBatch SeededBatch() {
  torch::manual_seed(12);
  return {torch::randn({2, 4, 8, 8, 8}), torch::randn({2, 1, 8, 8, 8}),
          torch::tensor({99, 799}, torch::kInt64)};
}

// The MSE loss of `model` on `b`, the forward pass under bf16 autocast when
// `bf16`.
torch::Tensor BatchLoss(UNet3d& model, const FixedBatch& b, bool bf16) {
  torch::Tensor out;
  {
    worker::AutocastScope autocast(bf16, c10::Device(c10::kCPU));
    out = model->forward(b.x, b.t);
  }
  return torch::mse_loss(out.to(torch::kFloat32), b.target);
}

// Loss and gradients of one UNet step on fixed data, with or without
// checkpointing, optionally under bf16 autocast.
struct StepResult {
  double loss = 0;
  std::vector<torch::Tensor> grads;
};
StepResult UNetStep(bool checkpoint, bool bf16) {
  UNet3d model = SeededUNet(checkpoint, bf16);
  torch::Tensor loss = BatchLoss(model, SeededBatch(), bf16);
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

// The loss of each of `steps` Adam steps with learning rate `lr` on
// UNetStep's model and batch.
std::vector<double> FitOneBatch(bool bf16, int steps, double lr) {
  UNet3d model = SeededUNet(false, bf16);
  const FixedBatch batch = SeededBatch();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(lr));
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    adam.zero_grad();
    torch::Tensor loss = BatchLoss(model, batch, bf16);
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
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

TEST_CASE(
    "CheckpointedForward: recomputes in backward and gives every input and "
    "parameter its gradient",
    "[ddpm][unit][checkpointing]") {
  struct Scale : torch::nn::Module {
    Scale() { w = register_parameter("w", torch::randn({3})); }
    torch::Tensor w;
  } module;
  torch::Tensor x = torch::randn({3}, torch::requires_grad());
  torch::Tensor z = torch::randn({3}, torch::requires_grad());
  const torch::Tensor constant = torch::randn({3});  // needs no gradient
  int calls = 0;
  auto fn = [&](const std::vector<torch::Tensor>& in) {
    ++calls;
    return (in[0] * module.w).sin().sum() + (in[1] * in[2]).sum();
  };
  torch::Tensor y = CheckpointedForward(module, fn, {x, z, constant});
  CHECK(calls == 1);
  y.backward();
  CHECK(calls == 2);  // recomputed in the backward pass
  const torch::Tensor w = module.w.detach();
  CHECK(torch::allclose(x.grad(), ((x * w).cos() * w).detach()));
  CHECK(torch::allclose(module.w.grad(), ((x * w).cos() * x).detach()));
  CHECK(torch::allclose(z.grad(), constant));
  // Without grad mode it is a plain call.
  torch::NoGradGuard no_grad;
  CheckpointedForward(module, fn, {x, z, constant});
  CHECK(calls == 3);
}

TEST_CASE("ddpm: gradient checkpointing refuses batch norm",
          "[ddpm][unit][checkpointing]") {
  UNet3dOptions o;
  o.norm = NormKind::kBatch;
  o.gradient_checkpointing = true;
  CHECK_THROWS_WITH(UNet3d(o), Catch::Contains("needs --norm group"));
}

TEST_CASE("ddpm: the UNet learns under bf16 autocast with group norm",
          "[ddpm][unit][amp]") {
  // Torch 1.13's CPU group_norm refused bf16 input with float32 weights.
  const StepResult r = UNetStep(false, true);
  CHECK(std::isfinite(r.loss));
  for (const auto& g : r.grads) CHECK(g.isfinite().all().item<bool>());
  // And the steps learn: 15 Adam steps (lr 1e-2) on one batch. Measured
  // over 8 seeds of model and batch: the last loss is 0.21-0.42 of the
  // first under bf16, and within 0.6% of fp32's last; with lr 0 (a model
  // that never learns) it stays at the first, which the bars fail.
  const int steps = 15;
  const std::vector<double> bf16 = FitOneBatch(true, steps, 1e-2);
  const std::vector<double> fp32 = FitOneBatch(false, steps, 1e-2);
  const std::vector<double> still = FitOneBatch(true, steps, 0);
  INFO("bf16 " << bf16.front() << " -> " << bf16.back() << ", fp32 "
               << fp32.front() << " -> " << fp32.back() << ", lr 0 "
               << still.front() << " -> " << still.back());
  CHECK(bf16.back() < 0.6 * bf16.front());
  CHECK(bf16.back() < 1.1 * fp32.back());
  CHECK_FALSE(still.back() < 0.6 * still.front());
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

TEST_CASE(
    "worker::Conv3d: a batch of one equals torch's layer, on the fast kernel",
    "[ddpm][unit]") {
  OneIntraOpThread one_thread;
  // The process's one convolution check (its native probe would count as
  // a slow_conv3d call below) runs first.
  worker::EnsureCpuConvolutionsAgree();
  torch::manual_seed(11);
  namespace nn = torch::nn;
  for (auto options : {nn::Conv3dOptions(32, 16, 3).padding(1),  // 2D slices
                       nn::Conv3dOptions(16, 8, 3).bias(false),  // no pad
                       nn::Conv3dOptions(16, 16, 3).stride(2).padding(1),
                       nn::Conv3dOptions(16, 8, 3).padding(1).padding_mode(
                           torch::kReplicate),         // zero sample
                       nn::Conv3dOptions(8, 4, 1)}) {  // torch's own
    nn::Conv3d plain(options);
    worker::Conv3d ours(options);
    {
      torch::NoGradGuard no_grad;
      ours->weight.copy_(plain->weight);
      if (plain->bias.defined()) ours->bias.copy_(plain->bias);
    }
    const torch::Tensor x0 =
        torch::randn({1, options.in_channels(), 12, 12, 12});
    torch::Tensor xa = x0.clone().requires_grad_(true);
    torch::Tensor xb = x0.clone().requires_grad_(true);
    const torch::Tensor ya = plain->forward(xa);
    OpCounter slow(kSlowConv3d);
    const torch::Tensor yb = ours->forward(xb);
    REQUIRE(yb.sizes() == ya.sizes());
    CHECK(torch::allclose(ya, yb, 1e-4, 1e-5));
    ya.square().sum().backward();
    yb.square().sum().backward();
    CHECK(
        torch::allclose(plain->weight.grad(), ours->weight.grad(), 1e-4, 1e-4));
    if (plain->bias.defined()) {
      CHECK(torch::allclose(plain->bias.grad(), ours->bias.grad(), 1e-4, 1e-4));
    }
    CHECK(torch::allclose(xa.grad(), xb.grad(), 1e-4, 1e-5));
    const bool padded = worker::TakesSingleSampleNativeKernel(*plain, x0);
    INFO("kernel " << options.kernel_size() << " stride " << options.stride());
    CHECK(padded == (options.kernel_size()->at(0) == 3));
    // Where oneDNN disagrees with ATen (cpu_convolution_check.h) it is off
    // and every convolution is native: there is no fast kernel to count.
    if (padded && at::globalContext().userEnabledMkldnn()) {
      CHECK(slow.count() == 0);
    }
  }
}

TEST_CASE("worker::Conv3d: only the inputs LibTorch sends to slow_conv3d",
          "[ddpm][unit]") {
  OneIntraOpThread one_thread;
  namespace nn = torch::nn;
  nn::Conv3d k3(nn::Conv3dOptions(32, 32, 3).padding(1));
  nn::Conv3d k5(nn::Conv3dOptions(32, 32, 5).padding(2));
  nn::Conv3d grouped(nn::Conv3dOptions(32, 32, 3).padding(1).groups(2));
  auto takes = [](const nn::Conv3d& c, std::vector<int64_t> shape) {
    return worker::TakesSingleSampleNativeKernel(*c, torch::zeros(shape));
  };
  CHECK(takes(k3, {1, 32, 16, 16, 16}));        // N*C*D*H = 8192
  CHECK(takes(k3, {1, 32, 20, 32, 16}));        // 20480
  CHECK_FALSE(takes(k3, {1, 32, 21, 32, 16}));  // 21504: oneDNN already
  CHECK_FALSE(takes(k3, {2, 32, 16, 16, 16}));
  CHECK_FALSE(takes(k5, {1, 32, 16, 16, 16}));
  CHECK_FALSE(takes(grouped, {1, 32, 16, 16, 16}));
  CHECK_FALSE(worker::TakesSingleSampleNativeKernel(
      *k3, torch::zeros({1, 32, 16, 16, 16}, torch::kDouble)));
  // The positive control of the fast-kernel checks: torch's own layer at
  // batch one does run slow_conv3d there.
  OpCounter slow(kSlowConv3d);
  torch::NoGradGuard no_grad;
  k3->forward(torch::zeros({1, 32, 16, 16, 16}));
  CHECK(slow.count() == 1);
}

// Debian trixie's LibTorch 2.6 (oneDNN 3.7.2) on an AVX-512 CPU computed
// the forward of 24-input-channel and the input gradient of
// 8-output-channel 3x3 layers wrongly (0.3 to 1.4 relative): the trainers
// read NaN within two steps. After Conv3d's first CPU forward, whatever the
// machine, convolutions agree with ATen's native kernels.
TEST_CASE(
    "worker::Conv3d: after its first CPU forward, convolutions agree "
    "with ATen's native kernels (oneDNN off where it does not)",
    "[ddpm][unit]") {
  namespace nn = torch::nn;
  worker::Conv3d conv(nn::Conv3dOptions(24, 8, 3).padding(1));
  const torch::Tensor x =
      torch::randn({2, 24, 6, 6, 6}, torch::requires_grad());
  // The caller's modes survive the check that this first forward runs.
  {
    torch::NoGradGuard no_grad;
    conv->forward(x);
    CHECK_FALSE(torch::GradMode::is_enabled());
  }
  const worker::CpuConvolutionCheck& first =
      worker::EnsureCpuConvolutionsAgree();
  CAPTURE(first.worst_case, first.max_relative_difference);
  const worker::CpuConvolutionCheck now = worker::CompareCpuConvolutions();
  CAPTURE(now.worst_case, now.max_relative_difference);
  CHECK(now.agrees());
  CHECK(at::globalContext().userEnabledMkldnn() == first.agrees());

  // This layer's own output and input gradient, against the native kernel.
  torch::Tensor y = conv->forward(x);
  const torch::Tensor g = torch::randn_like(y);
  const torch::Tensor gx = torch::autograd::grad({y}, {x}, {g})[0];
  const bool onednn = at::globalContext().userEnabledMkldnn();
  at::globalContext().setUserEnabledMkldnn(false);
  torch::Tensor y_native = conv->forward(x);
  const torch::Tensor gx_native =
      torch::autograd::grad({y_native}, {x}, {g})[0];
  at::globalContext().setUserEnabledMkldnn(onednn);
  CHECK(torch::allclose(y, y_native, 1e-4, 1e-5));
  CHECK(torch::allclose(gx, gx_native, 1e-4, 1e-5));
}

TEST_CASE(
    "worker::CompareCpuConvolutions: leaves the random stream, "
    "autocast, grad mode and the oneDNN switch as they were",
    "[ddpm][unit]") {
  torch::manual_seed(11);
  const torch::Tensor a = torch::randn({8});
  torch::manual_seed(11);
  worker::CpuConvolutionCheck check;
  torch::Tensor b;
  {
    worker::AutocastScope autocast(true);
    torch::NoGradGuard no_grad;
    const bool onednn = at::globalContext().userEnabledMkldnn();
    check = worker::CompareCpuConvolutions();
    b = torch::randn({8});
    CHECK(at::globalContext().userEnabledMkldnn() == onednn);
    CHECK_FALSE(torch::GradMode::is_enabled());
    CHECK(b.reshape({2, 4}).mm(b.reshape({4, 2})).scalar_type() ==
          torch::kBFloat16);
  }
  CHECK(torch::equal(b, a));
  if (at::hasMKLDNN()) {
    CHECK(check.onednn_available);
    CHECK(check.worst_case.rfind("conv", 0) == 0);
  }
  worker::CpuConvolutionCheck wrong;
  wrong.onednn_available = true;
  wrong.max_relative_difference = 1.42;
  wrong.worst_case = "conv3d 2x24x8^3 -> 8, forward";
  CHECK_FALSE(wrong.agrees());
  const std::string warning = worker::CpuConvolutionWarning(wrong);
  CHECK(warning.find("conv3d 2x24x8^3 -> 8, forward: 1.42 relative") !=
        std::string::npos);
  CHECK(warning.find("oneDNN is off for this process") != std::string::npos);
}

TEST_CASE(
    "worker::Conv3d: under CPU autocast an input smaller than the "
    "kernel runs in float32, equal to the float32 layer",
    "[ddpm][unit]") {
  // LibTorch 2.6's bf16 CPU convolution gave such layers non-finite weight
  // gradients (ResNet-50's 1^3 and 2^3 stages: NaN after one --amp step).
  namespace nn = torch::nn;
  torch::manual_seed(3);
  worker::Conv3d ours(nn::Conv3dOptions(8, 8, 3).padding(1));
  nn::Conv3d plain(nn::Conv3dOptions(8, 8, 3).padding(1));
  {
    torch::NoGradGuard no_grad;
    plain->weight.copy_(ours->weight);
    plain->bias.copy_(ours->bias);
  }
  const torch::Tensor x = torch::randn({4, 8, 2, 1, 2});
  const torch::Tensor big = torch::randn({4, 8, 3, 3, 3});
  torch::Tensor y, expected = plain->forward(x);
  {
    worker::AutocastScope autocast(true);
    CHECK(worker::SmallerThanKernelUnderCpuAutocast(*ours, x));
    CHECK_FALSE(worker::SmallerThanKernelUnderCpuAutocast(*ours, big));
    y = ours->forward(x);
    // Larger inputs keep autocast's bfloat16, and autocast stays on.
    CHECK(ours->forward(big).scalar_type() == torch::kBFloat16);
  }
  CHECK_FALSE(worker::SmallerThanKernelUnderCpuAutocast(*ours, x));
  REQUIRE(y.scalar_type() == torch::kFloat);
  CHECK(torch::allclose(y, expected, 1e-5, 1e-6));
  y.square().sum().backward();
  expected.square().sum().backward();
  CHECK(torch::allclose(ours->weight.grad(), plain->weight.grad(), 1e-4, 1e-5));
}

TEST_CASE("ddpm: the UNet at one volume per rank takes batch two's kernels",
          "[ddpm][unit]") {
  if (!worker::EnsureCpuConvolutionsAgree().agrees()) {
    DDPRUN_SKIP(
        "oneDNN is off on this CPU (its convolutions disagree with "
        "ATen's, cpu_convolution_check.h): every convolution runs "
        "ATen's native kernel, none is faster to count");
  }
  OneIntraOpThread one_thread;
  // 2 ranks at the trainer's total batch 2 give each rank one volume: with
  // torch's Conv3d this step was 3x slower than 1 rank at batch 2. Its 1x1
  // skip convolutions run slow_conv3d at any batch on one thread (torch
  // finds that faster), so the count must not grow at batch one.
  torch::manual_seed(5);
  UNet3dOptions o;
  o.width = 32;
  UNet3d net(o);
  auto slow_calls = [&](int64_t batch) {
    const torch::Tensor x = torch::randn({batch, 4, 16, 16, 16});
    const torch::Tensor t = torch::full({batch}, int64_t{7});
    OpCounter slow(kSlowConv3d);
    net->forward(x, t).square().mean().backward();
    return slow.count();
  };
  const int at_two = slow_calls(2);
  CHECK(at_two == 2);  // the two 1x1 skips
  CHECK(slow_calls(1) == at_two);
  // Its parameters keep torch's names (checkpoints load either way).
  CHECK(net->named_parameters().contains("conv_in.weight"));
  CHECK(net->named_parameters().contains("blocks.0.conv1.bias"));
}

}  // namespace
}  // namespace ddprun::examples
