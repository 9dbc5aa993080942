// The trainer frame's Torch pieces in one process: a step of k accumulated
// micro-batches equals one step of the whole batch, fp16 loss scaling skips
// a step with inf gradients, precision resolution on the CPU, the best
// checkpoint next to the rotated ones, and the loop's step layout.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
// glog (through Torch) defines CHECK; Catch's must win in this file.
#undef CHECK
#include "ddprun_catch.h"

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/errors.h"
#include "examples/frame/mixed_precision.h"
#include "examples/frame/step_runner.h"
#include "examples/frame/train_loop.h"
#include "examples/frame/trainer_session.h"
#include "tests/common/remove_at_exit.h"

namespace ddprun::examples {
namespace {

// A small non-linear model whose gradient depends on every sample.
torch::nn::Sequential SmallModel() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::Tanh(),
                               torch::nn::Linear(5, 1));
}

std::vector<at::Tensor> Grads(torch::nn::Sequential& m) {
  std::vector<at::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

double MaxDiff(const std::vector<at::Tensor>& a,
               const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

TEST_CASE(
    "StepRunner: 4 accumulated micro-batches of 2 give the loss, gradient "
    "and update of one batch of 8",
    "[frame][accumulation]") {
  const at::Tensor x = torch::randn({8, 6});
  const at::Tensor y = torch::randn({8, 1});
  worker::World world;
  auto run = [&](int64_t k, torch::nn::Sequential& m, double* loss) {
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
    StepRunner runner(world, m->parameters(), &sgd, nullptr, nullptr, {});
    const int64_t b = 8 / k;
    *loss = runner.Step(k, [&](int64_t i) {
      return torch::mse_loss(m->forward(x.narrow(0, i * b, b)),
                             y.narrow(0, i * b, b));
    });
  };
  torch::nn::Sequential whole = SmallModel(), micro = SmallModel();
  double whole_loss = 0, micro_loss = 0;
  run(1, whole, &whole_loss);
  run(4, micro, &micro_loss);
  CHECK(micro_loss == Approx(whole_loss).epsilon(1e-6));
  CHECK(MaxDiff(Grads(micro), Grads(whole)) < 1e-6);
  CHECK(MaxDiff(micro->parameters(), whole->parameters()) < 1e-6);
  // The step did change the parameters (a test that could not fail would
  // pass without the update too).
  CHECK(MaxDiff(whole->parameters(), SmallModel()->parameters()) > 1e-4);
}

TEST_CASE(
    "StepRunner: fp16 loss scaling skips a step with inf gradients and "
    "halves the scale",
    "[frame][precision]") {
  worker::World world;
  torch::nn::Sequential m = SmallModel();
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
  StepRunnerOptions options;
  options.loss_scaling = true;
  options.scaler.init_scale = 1024;
  StepRunner runner(world, m->parameters(), &sgd, nullptr, nullptr, options);
  const at::Tensor x = torch::randn({4, 6});
  std::vector<at::Tensor> before;
  for (auto& p : m->parameters()) before.push_back(p.detach().clone());

  // 1e36 x 1024 overflows float32 in backward: every gradient is inf.
  runner.Step(2, [&](int64_t) { return m->forward(x).sum() * 1e36; });
  CHECK(runner.skipped_steps() == 1);
  CHECK(runner.loss_scale() == 512);
  CHECK(MaxDiff(m->parameters(), before) == 0);  // no update

  // A finite step goes through at the lowered scale, with gradients that
  // are the unscaled ones.
  const double loss = runner.Step(2, [&](int64_t) {
    return torch::mse_loss(m->forward(x), torch::zeros({4, 1}));
  });
  CHECK(std::isfinite(loss));
  CHECK(runner.skipped_steps() == 1);
  CHECK(runner.loss_scale() == 512);
  CHECK(MaxDiff(m->parameters(), before) > 0);
  torch::nn::Sequential plain = SmallModel();
  torch::mse_loss(plain->forward(x), torch::zeros({4, 1})).backward();
  CHECK(MaxDiff(Grads(m), Grads(plain)) < 1e-5);
}

TEST_CASE("StepRunner: clips the gradient norm before the step", "[frame]") {
  worker::World world;
  torch::nn::Sequential m = SmallModel();
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.1));
  StepRunnerOptions options;
  options.clip_grad_norm = 0.5;
  StepRunner runner(world, m->parameters(), &sgd, nullptr, nullptr, options);
  runner.Step(1, [&](int64_t) {
    return m->forward(torch::ones({3, 6})).sum() * 100;
  });
  double norm = 0;
  for (const auto& g : Grads(m)) norm += g.pow(2).sum().item<double>();
  CHECK(std::sqrt(norm) == Approx(0.5).epsilon(1e-4));
  CHECK(runner.learning_rate() == Approx(0.1));
}

TEST_CASE("ResolvePrecision: --amp and --mixed_precision on the CPU",
          "[frame][precision]") {
  const c10::Device cpu(c10::kCPU);
  const Precision none = ResolvePrecision("", "", cpu);
  CHECK_FALSE(none.autocast);
  CHECK(none.description == "fp32");
  CHECK_FALSE(ResolvePrecision("no", "", cpu).autocast);
  const Precision bf16 = ResolvePrecision("bf16", "", cpu);
  CHECK(bf16.autocast);
  CHECK(bf16.dtype == at::kBFloat16);
  CHECK_FALSE(bf16.loss_scaling);
  CHECK(bf16.note.empty());
  CHECK(ResolvePrecision("", "bf16", cpu).description == "bf16 autocast");
  CHECK_THROWS_AS(ResolvePrecision("bf16", "fp16", cpu), worker::ConfigError);
  // fp16: float16 with loss scaling where the CPU autocast has it
  // (LibTorch >= 2.2), else bf16 and a note.
  const Precision fp16 = ResolvePrecision("fp16", "", cpu);
  CHECK(fp16.autocast);
  if (worker::AutocastSupported(cpu, at::kHalf)) {
    CHECK(fp16.dtype == at::kHalf);
    CHECK(fp16.loss_scaling);
    CHECK(fp16.note.empty());
  } else {
    CHECK(fp16.dtype == at::kBFloat16);
    CHECK_FALSE(fp16.loss_scaling);
    CHECK(fp16.note.find("training with bf16 autocast instead") !=
          std::string::npos);
    CHECK_THROWS_AS(worker::AutocastScope(true, cpu, at::kHalf),
                    worker::ConfigError);
  }
}

TEST_CASE(
    "Checkpointer::SaveNamed: a best file outside the rotation, never "
    "picked as the latest, loadable by path",
    "[frame][checkpoint]") {
  const std::string dir =
      "/tmp/ddprun_frame_test_" + std::to_string(::getpid()) + "_ckpt";
  std::filesystem::remove_all(dir);
  worker::World world;
  worker::Checkpointer ckpt(world, {dir, /*every_steps=*/1, /*keep_last=*/2});
  torch::nn::Linear net(3, 2);
  worker::CheckpointParts parts;
  parts.model = net.ptr().get();
  worker::TrainState state;
  state.epoch = 1;
  state.step = 2;
  state.scalars["best/best.pt"] = 0.75;
  ckpt.SaveNamed("best.pt", state, parts);
  for (int64_t step = 3; step <= 6; ++step) {
    state.step = step;
    ckpt.Save(state, parts);
  }
  CHECK(worker::Checkpointer::ListComplete(dir).size() == 2);  // rotated
  CHECK(std::filesystem::exists(dir + "/best.pt"));            // kept
  CHECK(ckpt.LoadLatest(parts)->step == 6);
  const worker::TrainState best =
      worker::Checkpointer::LoadFile(dir + "/best.pt", parts);
  CHECK(best.step == 2);
  CHECK(best.scalars.at("best/best.pt") == 0.75);
  CHECK(worker::Checkpointer::IsComplete(dir + "/best.pt"));
  std::ofstream(dir + "/foreign.pt") << "PK\x03\x04 not ours";
  CHECK_FALSE(worker::Checkpointer::IsComplete(dir + "/foreign.pt"));
  CHECK_FALSE(worker::Checkpointer::IsComplete(dir + "/missing.pt"));
  CHECK_THROWS_AS(ckpt.SaveNamed("ckpt-000000000009.pt", state, parts),
                  worker::ConfigError);
  CHECK_THROWS_AS(ckpt.SaveNamed("a/b.pt", state, parts), worker::ConfigError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("StepMicroBatches: steps of micro_batch x accumulation, cut",
          "[frame]") {
  const auto steps = StepMicroBatches({0, 1, 2, 3, 4, 5, 6}, 2, 2);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0] == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  CHECK(steps[1] == std::vector<std::vector<int64_t>>{{4, 5}, {6}});
}

// The toy trainers' loop callbacks: item i loads as [i, i], a step is the
// mean square of `forward` over each micro-batch; `validate` may be null.
LoopCallbacks<at::Tensor> ToyCallbacks(
    TrainerSession& session,
    std::function<at::Tensor(const at::Tensor&)> forward,
    std::function<nlohmann::json(int64_t)> validate) {
  return {nullptr,
          [](const std::vector<int64_t>& p) -> StatusOr<at::Tensor> {
            return torch::tensor(p, torch::kFloat32)
                .reshape({-1, 1})
                .repeat({1, 2});
          },
          [&session, forward](std::vector<at::Tensor>& micro) {
            return session.Step(micro.size(), [&](int64_t m) {
              return forward(micro[m] / 12).pow(2).mean();
            });
          },
          std::move(validate)};
}

// Counts what the loop hands to an observer.
struct Recorder : TrainingObserver {
  std::vector<int64_t> steps;
  std::vector<nlohmann::json> epochs;
  int finished = 0;
  void OnStep(const StepRecord& s) override { steps.push_back(s.step); }
  void OnEpoch(const nlohmann::json& r) override { epochs.push_back(r); }
  void OnFinish() override { ++finished; }
};

TEST_CASE(
    "StepMicroBatches: a last micro-batch below the minimum joins the one "
    "before it",
    "[frame]") {
  using Steps = std::vector<std::vector<std::vector<int64_t>>>;
  // In its own step: 4 + 1 -> 5.
  CHECK(StepMicroBatches({0, 1, 2, 3, 4, 5, 6, 7, 8}, 4, 2, 2) ==
        Steps{{{0, 1, 2, 3}, {4, 5, 6, 7, 8}}});
  // Alone in the last step: it joins the previous step, whose count drops.
  CHECK(StepMicroBatches({0, 1, 2, 3, 4, 5, 6, 7, 8}, 4, 1, 2) ==
        Steps{{{0, 1, 2, 3}}, {{4, 5, 6, 7, 8}}});
  CHECK(StepMicroBatches({0, 1, 2, 3, 4}, 2, 2, 2) ==
        Steps{{{0, 1}, {2, 3, 4}}});
  // A tail of 2 with a minimum of 2 stays; so does every tail at minimum 1.
  CHECK(StepMicroBatches({0, 1, 2, 3, 4, 5}, 4, 1, 2) ==
        Steps{{{0, 1, 2, 3}}, {{4, 5}}});
  CHECK(StepMicroBatches({0, 1, 2, 3, 4}, 4, 1) ==
        Steps{{{0, 1, 2, 3}}, {{4}}});
  // Fewer positions than the minimum: one short micro-batch (the session
  // refuses to start such a run).
  CHECK(StepMicroBatches({7}, 4, 1, 2) == Steps{{{7}}});
  CHECK(StepMicroBatches({}, 4, 1, 2).empty());
}

// A toy trainer's command line "toy --output_dir DIR ARGS..." parsed (the
// session keeps a reference: the caller keeps it alive).
std::unique_ptr<TrainerCli> ToyCli(const std::string& dir,
                                   std::vector<std::string> args) {
  args.insert(args.begin(), {"toy", "--output_dir", dir});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  auto cli = std::make_unique<TrainerCli>("toy", TrainerDefaults{dir, 1, 0});
  REQUIRE_FALSE(cli->Parse(static_cast<int>(argv.size()), argv.data()));
  return cli;
}

// The flags TrainerCli registers for the trainers that clip and checkpoint
// (survival, ddpm, cascade), parsed from "toy ARGS..."; throws as Parse.
struct TrainingFlags {
  double clip_grad = 1.0;
  bool gradient_checkpointing = false;
  std::string help;
};
TrainingFlags ParseTrainingFlags(std::vector<std::string> args) {
  args.insert(args.begin(), "toy");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  TrainingFlags flags;
  TrainerCli cli("toy", TrainerDefaults{"runs/toy", 1, 0});
  cli.AddClipGrad(&flags.clip_grad);
  cli.AddGradientCheckpointing(&flags.gradient_checkpointing, "Recompute");
  // Outside REQUIRE: a ConfigError must reach the caller's CHECK_THROWS.
  const std::optional<int> code =
      cli.Parse(static_cast<int>(argv.size()), argv.data());
  REQUIRE_FALSE(code.has_value());
  flags.help = cli.app().help();
  return flags;
}

TEST_CASE(
    "TrainerCli: --clip_grad and --gradient_checkpointing, also under the "
    "guides' names",
    "[frame]") {
  const TrainingFlags defaults = ParseTrainingFlags({});
  CHECK(defaults.clip_grad == 1.0);
  CHECK_FALSE(defaults.gradient_checkpointing);
  for (const std::string& help :
       {"--clip_grad FLOAT:NONNEGATIVE=1", "--gradient_checkpointing",
        "--gradient_clip (= --clip_grad)", "--max_grad_norm (= --clip_grad)",
        "--activation_checkpointing (= --gradient_checkpointing)"}) {
    INFO(help);
    CHECK(defaults.help.find(help) != std::string::npos);
  }
  CHECK(ParseTrainingFlags({"--clip_grad", "0.5"}).clip_grad == 0.5);
  CHECK(ParseTrainingFlags({"--gradient_clip", "0.25"}).clip_grad == 0.25);
  CHECK(ParseTrainingFlags({"--max-grad-norm=2"}).clip_grad == 2);
  CHECK(ParseTrainingFlags({"--clip_grad", "0"}).clip_grad == 0);
  CHECK(ParseTrainingFlags({"--activation_checkpointing"})
            .gradient_checkpointing);
  CHECK(
      ParseTrainingFlags({"--gradient-checkpointing"}).gradient_checkpointing);
  // The guides' names as config keys, in a section as they write them.
  const std::string config = ddprun::testing::RemoveAtExit(
      "/tmp/ddprun_frame_test_flags_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(config) << "training:\n  gradient_clip: 0.75\n"
                           "  activation_checkpointing: true\n";
  const TrainingFlags from_file = ParseTrainingFlags({"--config", config});
  CHECK(from_file.clip_grad == 0.75);
  CHECK(from_file.gradient_checkpointing);
  CHECK_THROWS_WITH(ParseTrainingFlags({"--clip_grad", "-1"}),
                    Catch::Contains("--clip_grad"));
  CHECK_THROWS_AS(
      ParseTrainingFlags({"--clip_grad", "1", "--gradient_clip", "2"}),
      worker::ConfigError);
}

// One epoch of a batch-norm model (BatchNorm1d after a linear layer: a
// batch of one sample fails in training, as ResNet3d's 1x1x1 maps do) over
// `dataset` items with --batch_size `batch`; what the loop reported.
std::shared_ptr<Recorder> BatchNormEpoch(const std::string& dir, int64_t dataset,
                                    int64_t batch, int64_t min_micro_batch) {
  auto cli = ToyCli(dir, {"--epochs", "1", "--checkpoint_every", "0"});
  TrainerSession session(*cli);
  auto recorder = std::make_shared<Recorder>();
  session.AddObserver(recorder);
  torch::nn::Sequential model(torch::nn::Linear(2, 3),
                              torch::nn::BatchNorm1d(3));
  session.PlaceOnDevice(*model);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  session.Prepare({model.ptr(), &sgd});
  LoopConfig loop;
  loop.dataset_size = dataset;
  loop.micro_batch = batch;
  loop.min_micro_batch = min_micro_batch;
  loop.min_micro_batch_reason = "batch norm of one value per channel";
  session.Run<at::Tensor>(
      loop, ToyCallbacks(
                session, [&](const at::Tensor& x) { return model->forward(x); },
                nullptr));
  session.Done("toy");
  return recorder;
}

TEST_CASE(
    "TrainerSession: a batch-norm model trains every dataset size and a "
    "batch below its minimum stops at the start naming the flag",
    "[frame][session]") {
  const std::string dir =
      "/tmp/ddprun_frame_test_" + std::to_string(::getpid()) + "_minbatch";
  std::filesystem::remove_all(dir);
  // Without the minimum the last batch of one reaches batch norm.
  CHECK_THROWS(BatchNormEpoch(dir + "/a", 13, 4, 1));
  // With it: 4, 4, 5.
  CHECK(BatchNormEpoch(dir + "/b", 13, 4, 2)->steps ==
        std::vector<int64_t>{1, 2, 3});
  CHECK(BatchNormEpoch(dir + "/c", 14, 4, 2)->steps ==
        std::vector<int64_t>{1, 2, 3, 4});
  // An epoch of a single step measured no throughput: the record has none
  // (it used to say 0); with a second step there is one.
  const auto one_step = BatchNormEpoch(dir + "/f", 3, 4, 2);
  REQUIRE(one_step->epochs.size() == 1);
  CHECK_FALSE(one_step->epochs[0].contains("samples_per_s"));
  const auto two_steps = BatchNormEpoch(dir + "/g", 8, 4, 2);
  REQUIRE(two_steps->epochs.size() == 1);
  CHECK(two_steps->epochs[0].value("samples_per_s", 0.0) > 0);
  try {
    BatchNormEpoch(dir + "/d", 13, 1, 2);
    FAIL("--batch_size 1 trained a batch-norm model");
  } catch (const worker::ConfigError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("--batch_size 1") != std::string::npos);
    CHECK(what.find("at least 2") != std::string::npos);
    CHECK(what.find("use --batch_size 2 or more") != std::string::npos);
  }
  CHECK_THROWS_AS(BatchNormEpoch(dir + "/e", 1, 4, 2), worker::ConfigError);
  std::filesystem::remove_all(dir);
}

// A toy trainer in this process: 12 items, micro-batches of 2, 2 per step
// (3 steps per epoch), a scripted validation metric per epoch.
struct ToyRun {
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
  bool complete = false;
  double last_metric = 0;

  ToyRun(const std::string& dir, int epochs) {
    auto cli = ToyCli(dir, {"--epochs", std::to_string(epochs),
                            "--gradient_accumulation_steps", "2",
                            "--checkpoint_every", "0"});
    TrainerSession session(*cli);
    session.AddObserver(recorder);
    torch::nn::Linear model(2, 1);
    session.PlaceOnDevice(*model);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    session.Prepare({model.ptr(), &sgd});
    complete = session.complete();
    LoopConfig loop;
    loop.dataset_size = 12;
    loop.micro_batch = 2;
    loop.accumulation = session.common().gradient_accumulation_steps;
    loop.best = {"val_metric", /*higher_is_better=*/true, "toy_best.pt"};
    const double script[] = {0.5, 0.7, 0.6, 0.9};
    session.Run<at::Tensor>(
        loop, ToyCallbacks(
                  session,
                  [&](const at::Tensor& x) { return model->forward(x); },
                  [&](int64_t epoch) -> nlohmann::json {
                    return {{"val_metric", script[epoch]}};
                  }));
    last_metric = session.last_metrics().value("val_metric", -1.0);
    session.Done("toy");
  }
};

TEST_CASE(
    "TrainerSession: observers get every step and epoch, the best "
    "checkpoint follows the metric, a finished run trains nothing",
    "[frame][session]") {
  const std::string dir =
      "/tmp/ddprun_frame_test_" + std::to_string(::getpid()) + "_session";
  std::filesystem::remove_all(dir);
  ToyRun first(dir, 3);
  CHECK_FALSE(first.complete);
  CHECK(first.recorder->steps ==
        std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  REQUIRE(first.recorder->epochs.size() == 3);
  CHECK(first.recorder->epochs[2]["epoch"] == 3);
  CHECK(first.recorder->epochs[2]["step"] == 9);
  CHECK(first.recorder->finished == 1);
  // Best at epoch 2 (0.7 > 0.5; 0.6 is not better).
  const worker::TrainState best =
      worker::Checkpointer::LoadFile(dir + "/checkpoints/toy_best.pt", {});
  CHECK(best.step == 6);
  CHECK(best.epoch == 2);
  CHECK(best.scalars.at("best/toy_best.pt") == 0.7);
  CHECK(worker::Checkpointer::ListComplete(dir + "/checkpoints").size() == 1);

  ToyRun again(dir, 3);
  CHECK(again.complete);
  CHECK(again.recorder->steps.empty());
  CHECK(again.recorder->epochs.empty());
  CHECK(again.recorder->finished == 0);
  CHECK(again.last_metric == 0.6);  // from the final checkpoint

  ToyRun more(dir, 4);  // a larger --epochs trains on, best keeps counting
  CHECK(more.recorder->steps == std::vector<int64_t>{10, 11, 12});
  CHECK(worker::Checkpointer::LoadFile(dir + "/checkpoints/toy_best.pt", {})
            .step == 12);
  std::filesystem::remove_all(dir);
}

// A toy run whose steps draw noise from Torch's default generator (as
// ddpm's do) and whose validation draws 4 numbers, records the first, then
// draws `validation_draws` more (as a sampler does); returns the epochs'
// records and the trained weights.
struct NoisyRun {
  std::vector<nlohmann::json> epochs;
  std::vector<at::Tensor> weights;
};
NoisyRun RunNoisy(const std::string& dir, int64_t validation_draws) {
  std::filesystem::remove_all(dir);
  auto cli = ToyCli(dir, {"--epochs", "3", "--checkpoint_every", "0"});
  TrainerSession session(*cli);
  auto recorder = std::make_shared<Recorder>();
  session.AddObserver(recorder);
  torch::nn::Linear model(2, 1);
  session.PlaceOnDevice(*model);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  session.Prepare({model.ptr(), &sgd});
  LoopConfig loop;
  loop.dataset_size = 8;
  loop.micro_batch = 2;
  session.Run<at::Tensor>(
      loop, ToyCallbacks(
                session,
                [&](const at::Tensor& x) {
                  return model->forward(x + torch::randn_like(x));
                },
                [&](int64_t) -> nlohmann::json {
                  const double first = torch::randn({4})[0].item<double>();
                  torch::randn({validation_draws});  // the sampler's rest
                  return {{"val_first_draw", first}};
                }));
  session.Done("toy");
  NoisyRun run{recorder->epochs, {}};
  for (const auto& p : model->parameters()) run.weights.push_back(p.clone());
  std::filesystem::remove_all(dir);
  return run;
}

TEST_CASE(
    "TrainerSession: a validation's random draws depend on its seed and "
    "epoch only and leave the training stream as it was",
    "[frame][session]") {
  const std::string dir =
      "/tmp/ddprun_frame_test_" + std::to_string(::getpid()) + "_noisy";
  const NoisyRun few = RunNoisy(dir, 1);
  const NoisyRun many = RunNoisy(dir, 1000);
  REQUIRE(few.epochs.size() == 3);
  REQUIRE(many.epochs.size() == 3);
  for (size_t e = 0; e < 3; ++e) {
    INFO("epoch " << e + 1);
    // The same first draw whether the validation drew 1 or 1000 numbers
    // (and whatever training drew before it) ...
    CHECK(few.epochs[e]["val_first_draw"] == many.epochs[e]["val_first_draw"]);
    // ... and the same training loss: the draws did not shift training's.
    CHECK(few.epochs[e]["train_loss"] == many.epochs[e]["train_loss"]);
  }
  // Each epoch's validation has its own stream.
  CHECK(few.epochs[0]["val_first_draw"] != few.epochs[1]["val_first_draw"]);
  CHECK(MaxDiff(few.weights, many.weights) == 0.0);
}

}  // namespace
}  // namespace ddprun::examples
