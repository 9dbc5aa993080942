// The survival trainer's model and statistics in-process: activation
// checkpointing gives the gradients of the plain model, the Kaplan-Meier
// estimate and the log-rank test against hand computations, the guide's CSV
// layout and its fold split.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <torch/torch.h>

#include "ddprun_catch.h"

#include "ddprun/worker/precision.h"
#include "examples/frame/nifti_io.h"
#include "examples/survival/cox_loss.h"
#include "examples/survival/kaplan_meier.h"
#include "examples/survival/resnet3d.h"
#include "examples/survival/risk_groups.h"
#include "examples/survival/survival_data.h"

namespace ddprun::examples {
namespace {

struct StepResult {
  double loss = 0;
  std::vector<torch::Tensor> grads;    // one per parameter
  std::vector<torch::Tensor> buffers;  // after the step
  torch::Tensor input_grad;
};

// One training forward/backward of a fresh model (seeded: identical
// weights every call) on a fixed batch.
StepResult TrainStep(ResNet3dOptions options, bool autocast,
                     bool input_grad = false) {
  torch::manual_seed(7);
  ResNet3d model(options);
  model->train();
  torch::manual_seed(11);
  // 32^3, not smaller: at 16^3 LibTorch's own CPU bf16 conv3d weight
  // gradient of the 16->32 channel stride-2 block (4^3 -> 2^3 voxels)
  // comes out as garbage in about half the runs, with or without
  // checkpointing (seen with 1.13 and 2.6; the values vary run to run).
  torch::Tensor x = torch::randn({4, 1, 32, 32, 32});
  if (input_grad) x.requires_grad_(true);
  const torch::Tensor time = torch::tensor({3.0f, 1.0f, 2.0f, 5.0f});
  const torch::Tensor event = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f});
  torch::Tensor risk;
  {
    worker::AutocastScope scope(autocast, torch::kCPU);
    risk = model->forward(x);
  }
  torch::Tensor loss =
      CoxPartialLikelihoodLoss(risk.to(torch::kFloat32), time, event);
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (const torch::Tensor& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    r.grads.push_back(p.grad().clone());
  }
  for (const torch::Tensor& b : model->buffers())
    r.buffers.push_back(b.clone());
  if (input_grad) r.input_grad = x.grad().clone();
  return r;
}

// Largest |a - b| / (max |b| + tiny) over the tensors.
double MaxRelativeDifference(const std::vector<torch::Tensor>& a,
                             const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const torch::Tensor fa = a[i].to(torch::kFloat64);
    const torch::Tensor fb = b[i].to(torch::kFloat64);
    const double scale = fb.abs().max().item<double>() + 1e-12;
    worst = std::max(worst, (fa - fb).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST_CASE(
    "survival ResNet3d: activation checkpointing gives the same loss, "
    "gradients and batch-norm statistics",
    "[survival][checkpointing]") {
  for (const char* depth : {"resnet10", "resnet50"}) {
    INFO(depth);
    ResNet3dOptions plain;
    plain.depth = depth;
    plain.width = 4;
    ResNet3dOptions checkpointed = plain;
    checkpointed.gradient_checkpointing = true;
    const StepResult a = TrainStep(plain, false, /*input_grad=*/true);
    const StepResult b = TrainStep(checkpointed, false, /*input_grad=*/true);
    CHECK(a.loss == Approx(b.loss).epsilon(1e-6));
    CHECK(MaxRelativeDifference(b.grads, a.grads) < 1e-5);
    CHECK(MaxRelativeDifference({b.input_grad}, {a.input_grad}) < 1e-5);
    // Running statistics and the batch counter moved once, not twice.
    CHECK(MaxRelativeDifference(b.buffers, a.buffers) < 1e-6);
  }
}

// Under bf16 autocast the recomputation must run in the forward's autocast
// (ResNet3dOptions::recompute_scope): then the gradients are the bf16
// model's, up to bf16 rounding (the first block's input gradient sums its
// two paths in another order: about 2^-8 relative in the stem), far from
// the fp32 model's. Without the scope, backward fails (bf16 activations
// meet fp32 weights) instead of silently computing something else.
TEST_CASE(
    "survival ResNet3d: checkpointing under bf16 autocast recomputes in the "
    "forward's precision",
    "[survival][checkpointing]") {
  ResNet3dOptions plain;
  plain.width = 4;
  const StepResult reference = TrainStep(plain, /*autocast=*/true, true);
  const StepResult fp32 = TrainStep(plain, /*autocast=*/false, true);

  ResNet3dOptions scoped = plain;
  scoped.gradient_checkpointing = true;
  scoped.recompute_scope = [](const std::function<void()>& run) {
    worker::AutocastScope scope(true, torch::kCPU);
    run();
  };
  const StepResult same = TrainStep(scoped, true, true);
  CHECK(same.loss == Approx(reference.loss).epsilon(1e-6));
  // The input's gradient goes back through every recomputed block. The
  // weights' gradients are not compared: LibTorch's CPU bf16 conv3d weight
  // gradient is not deterministic here (run to run, without checkpointing
  // too: up to 0.6 relative on a 16->16 block with 2.6, garbage at 4^3
  // voxels with 1.13 and 2.6).
  const double scoped_difference =
      MaxRelativeDifference({same.input_grad}, {reference.input_grad});
  CHECK(scoped_difference < 2.0 / 256);
  CHECK(MaxRelativeDifference({fp32.input_grad}, {reference.input_grad}) >
        20 * scoped_difference);

  ResNet3dOptions unscoped = plain;
  unscoped.gradient_checkpointing = true;
  CHECK_THROWS(TrainStep(unscoped, true));
}

TEST_CASE("survival ResNet3d: checkpointing is off outside training",
          "[survival][checkpointing]") {
  ResNet3dOptions options;
  options.width = 4;
  options.gradient_checkpointing = true;
  torch::manual_seed(3);
  ResNet3d model(options);
  model->eval();
  const torch::Tensor x = torch::randn({2, 1, 16, 16, 16});
  torch::NoGradGuard no_grad;
  const torch::Tensor y = model->forward(x);
  CHECK(y.sizes() == torch::IntArrayRef({2, 1}));
  CHECK(!y.requires_grad());
}

TEST_CASE("survival KaplanMeier: steps, ties and censoring by hand",
          "[survival][km]") {
  // Times 1 2 2 3 4 5, events 1 1 0 1 0 1: at t=1 6 at risk, 1 event ->
  // 5/6; t=2 5 at risk, 1 event (the censored one at 2 still counts) ->
  // 5/6*4/5 = 2/3; t=3 3 at risk -> 2/3*2/3 = 4/9; t=5 1 at risk -> 0.
  const std::vector<double> time{2, 1, 3, 2, 4, 5};
  const std::vector<double> event{1, 1, 1, 0, 0, 1};
  const KaplanMeierEstimate km = KaplanMeier(time, event);
  CHECK(km.subjects == 6);
  CHECK(km.events == 4);
  CHECK(km.times == std::vector<double>{1, 2, 3, 5});
  REQUIRE(km.survival.size() == 4);
  CHECK(km.survival[0] == Approx(5.0 / 6));
  CHECK(km.survival[1] == Approx(2.0 / 3));
  CHECK(km.survival[2] == Approx(4.0 / 9));
  CHECK(km.survival[3] == Approx(0.0));
  CHECK(km.censored == std::vector<double>{2, 4});

  const KaplanMeierEstimate part =
      KaplanMeier(time, event, {true, true, false, false, false, false});
  CHECK(part.subjects == 2);
  CHECK(part.times == std::vector<double>{1, 2});
  CHECK(part.survival.back() == Approx(0.0));
}

TEST_CASE("survival LogRank: a hand computation and the degenerate cases",
          "[survival][km]") {
  // Group A events at 1 and 3, group B at 2 and 4, no censoring.
  // t=1: n=4, n1=2, d=1, d1=1: O-E = 0.5, V = 1*0.5*0.5*3/3 = 0.25
  // t=2: n=3, n1=1, d=1, d1=0: O-E = -1/3, V = (1/3)(2/3) = 2/9
  // t=3: n=2, n1=1, d=1, d1=1: O-E = 0.5, V = 0.25
  // t=4: n=1: no variance.  chi2 = (2/3)^2 / (0.5 + 2/9) = 0.6154
  const std::vector<double> time{1, 3, 2, 4};
  const std::vector<double> event{1, 1, 1, 1};
  const LogRankResult r = LogRank(time, event, {true, true, false, false});
  CHECK(r.chi2 == Approx((4.0 / 9) / (0.5 + 2.0 / 9)));
  CHECK(r.p == Approx(std::erfc(std::sqrt(r.chi2 / 2))));
  CHECK(r.p == Approx(0.4328).margin(1e-3));

  const LogRankResult empty = LogRank(time, event, {true, true, true, true});
  CHECK(empty.chi2 == 0);
  CHECK(empty.p == 1);

  CHECK(HighRiskHalf({0.3, -1, 2, 0.1}) ==
        std::vector<bool>{true, false, true, false});
  CHECK(HighRiskHalf({1, 1, 1}) == std::vector<bool>{false, false, false});
}

TEST_CASE("survival RiskGroupsPicture: an RGB picture in [0, 1]",
          "[survival][km]") {
  std::vector<double> risk, time, event;
  for (int i = 0; i < 20; ++i) {
    risk.push_back(i);
    time.push_back(40.0 - i + (i % 3));
    event.push_back(i % 4 != 0);
  }
  StatusOr<torch::Tensor> picture = RiskGroupsPicture(risk, time, event, "t");
  REQUIRE(picture.ok());
  CHECK(picture->sizes() == torch::IntArrayRef({3, 520, 800}));
  CHECK(picture->min().item<double>() >= 0);
  CHECK(picture->max().item<double>() <= 1);
  CHECK(!RiskGroupsPicture({}, {}, {}, "t").ok());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/survival_model_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

TEST_CASE(
    "survival LoadSurvivalVolume: resized to the model's size and z-scored "
    "with the sample standard deviation",
    "[survival]") {
  const std::string dir = "/tmp/ddprun_survival_load_" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/v.nii";
  const torch::Tensor raw =
      torch::arange(8 * 8 * 8, torch::kFloat32).reshape({8, 8, 8}) * 0.5 + 7;
  REQUIRE(WriteNifti(path, raw).ok());

  auto same = LoadSurvivalVolume(path, {8, 8, 8});
  REQUIRE(same.ok());
  const torch::Tensor want = (raw - raw.mean()) / (raw.std() + 1e-6);
  CHECK(same->sizes() == torch::IntArrayRef({1, 8, 8, 8}));
  CHECK(torch::allclose(same->squeeze(0), want, 1e-5, 1e-5));

  auto small = LoadSurvivalVolume(path, {4, 4, 4});
  REQUIRE(small.ok());
  CHECK(small->sizes() == torch::IntArrayRef({1, 4, 4, 4}));
  CHECK(std::abs(small->mean().item<double>()) < 1e-5);
  CHECK(std::abs(small->std().item<double>() - 1.0) < 1e-4);

  // A constant volume has no spread: zeros, not NaN.
  REQUIRE(WriteNifti(path, torch::full({8, 8, 8}, 5.0)).ok());
  auto flat = LoadSurvivalVolume(path, {8, 8, 8});
  REQUIRE(flat.ok());
  CHECK(flat->eq(0).all().item<bool>());
  std::filesystem::remove_all(dir);
}

TEST_CASE("survival CSV: the guide's columns and its Fold_1 split",
          "[survival][data]") {
  const std::string csv =
      WriteFile("dataset.csv",
                "case_num,NIFTI path,time,event,age,Fold_1\n"
                "0,a.nii.gz,3.5,1,61,train\n1,b.nii.gz,2,0,70,val\n"
                "2,c.nii.gz,4,1,55,test\n3,d.nii.gz,1,1,48,train\n");
  StatusOr<SurvivalTable> table = ReadSurvivalCsv(csv, "Fold_1");
  REQUIRE(table.ok());
  CHECK(table->image_column == "NIFTI path");
  CHECK(table->has_fold);
  REQUIRE(table->records.size() == 4);
  CHECK(table->records[1].fold == "val");
  CHECK(table->records[0].image ==
        (std::filesystem::path(csv).parent_path() / "a.nii.gz").string());
  StatusOr<FoldSplit> split =
      SplitByFold(*table, csv, "Fold_1", "train", "val");
  REQUIRE(split.ok());
  CHECK(split->train == std::vector<int64_t>{0, 3});
  CHECK(split->val == std::vector<int64_t>{1});
  CHECK(split->unused == 1);

  StatusOr<FoldSplit> none = SplitByFold(*table, csv, "Fold_1", "train", "v");
  REQUIRE(!none.ok());
  CHECK(none.status().message() ==
        csv +
            ": no row has Fold_1 = 'v' (--val_fold); the column holds "
            "'test', 'train', 'val'");

  StatusOr<SurvivalTable> required = ReadSurvivalCsv(csv, "Fold_2", true);
  REQUIRE(!required.ok());
  CHECK(required.status().message().find("missing column 'Fold_2'") !=
        std::string::npos);

  const std::string bad = WriteFile("bad.csv", "path,time,event\nx.nii,1,1\n");
  StatusOr<SurvivalTable> no_image = ReadSurvivalCsv(bad, "Fold_1");
  REQUIRE(!no_image.ok());
  CHECK(no_image.status().message() ==
        bad +
            ":1: missing column 'image' (or the guide's 'NIFTI path') "
            "(header has: path,time,event)");

  // A data root in the guide's layout resolves to its dataset.csv; without
  // it, reading the directory is one error naming the layout.
  const std::string dir = std::filesystem::path(csv).parent_path().string();
  const StatusOr<std::string> root = ResolveSurvivalCsv(dir);
  REQUIRE(root.ok());
  CHECK(*root == csv);
  const StatusOr<std::string> file = ResolveSurvivalCsv(bad);
  REQUIRE(file.ok());
  CHECK(*file == bad);
  std::filesystem::remove(csv);
  const StatusOr<std::string> no_root = ResolveSurvivalCsv(dir);
  REQUIRE(!no_root.ok());
  CHECK(no_root.status().message().find(
            dir +
            " is a directory without dataset.csv (the guide's layout: "
            "<data>/dataset.csv with columns NIFTI path,time,event,"
            "Fold_1); --csv_path takes that directory or the CSV file "
            "that lists the volumes, e.g. " +
            bad) == 0);
  StatusOr<SurvivalTable> directory = ReadSurvivalCsv(dir, "Fold_1");
  REQUIRE(!directory.ok());
  CHECK(directory.status().message() == no_root.status().message());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::examples
