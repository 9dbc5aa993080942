// cascade_trainer's pieces: gradient checkpointing against the plain call,
// the radiograph projector and the physics loss on synthetic patients, the
// diffusion sampler, the guide's config file and the precision accelerate
// launch asks for.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>
// glog (through Torch) defines CHECK; Catch's must win in this file.
#undef CHECK
#include "ddprun_catch.h"

#include "ddprun/worker/errors.h"
#include "ddprun/worker/precision.h"
#include "examples/cascade/cascade_data.h"
#include "examples/cascade/cascade_model.h"
#include "examples/cascade/cascade_options.h"
#include "examples/cascade/drr.h"
#include "examples/cascade/v_diffusion.h"
#include "examples/frame/image_io.h"
#include "tests/common/remove_at_exit.h"

namespace ddprun::examples {
namespace {

std::string TempDir(const std::string& tag) {
  const std::string dir =
      "/tmp/ddprun_cascade_unit_" + std::to_string(::getpid()) + "_" + tag;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return ddprun::testing::RemoveAtExit(dir);
}

StageModelOptions SmallStage(bool checkpointing, bool previous) {
  StageModelOptions o;
  o.stage.name = "stage2";
  o.stage.volume_size = {8, 8, 8};
  o.stage.voxel_dim = 16;
  o.stage.vit_depth = 3;
  o.stage.num_heads = 2;
  o.stage.patch_size = 2;
  o.xray = {16, 2, 4};
  o.conditioned_on_previous = previous;
  o.gradient_checkpointing = checkpointing;
  return o;
}

// Gradients of every parameter and of the input volume for one loss; the
// forward pass under bf16 autocast with `bf16`, backward outside it (as
// the trainers run them).
std::vector<torch::Tensor> Gradients(CascadeStage& stage, bool bf16) {
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({2, 1, 8, 8, 8}).requires_grad_(true);
  const torch::Tensor t = torch::tensor({3, 700});
  const torch::Tensor views = torch::rand({2, 2, 16, 16});
  const torch::Tensor previous = torch::randn({2, 1, 8, 8, 8});
  stage->zero_grad();
  torch::Tensor out;
  {
    worker::AutocastScope scope(bf16, c10::Device(c10::kCPU), at::kBFloat16);
    out = stage->forward(x, t, views, previous);
  }
  (out.to(torch::kFloat32).pow(2).mean() + out.to(torch::kFloat32).mean())
      .backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : stage->parameters()) grads.push_back(p.grad().clone());
  grads.push_back(x.grad().clone());
  return grads;
}

// Two stages with the same weights, one recomputing its blocks in
// backward. adaLN-Zero starts every gate at 0: give the weights values
// first so that every block contributes.
std::pair<CascadeStage, CascadeStage> TwinStages(
    const RecomputeAutocast& recompute) {
  torch::manual_seed(1);
  StageModelOptions plain_options = SmallStage(false, true);
  CascadeStage plain(plain_options);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : plain->parameters()) p.copy_(torch::randn_like(p) * 0.2);
  }
  StageModelOptions ckpt_options = SmallStage(true, true);
  ckpt_options.recompute = recompute;
  CascadeStage checkpointed(ckpt_options);
  {
    torch::NoGradGuard no_grad;
    const auto from = plain->parameters();
    auto to = checkpointed->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  return {plain, checkpointed};
}

TEST_CASE(
    "gradient checkpointing: the same gradients as the plain forward "
    "(parameters and input)",
    "[cascade][checkpoint]") {
  auto [plain, checkpointed] = TwinStages(RecomputeAutocast());
  const auto a = Gradients(plain, false);
  const auto b = Gradients(checkpointed, false);
  REQUIRE(a.size() == b.size());
  int nonzero = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(a[i], b[i], /*rtol=*/1e-6, /*atol=*/1e-7));
    nonzero += a[i].abs().sum().item<double>() > 0;
  }
  CHECK(nonzero == static_cast<int>(a.size()));
}

TEST_CASE(
    "gradient checkpointing: recomputes under the forward's bf16 autocast",
    "[cascade][checkpoint]") {
  RecomputeAutocast bf16;
  bf16.enabled = true;
  auto [plain, checkpointed] = TwinStages(bf16);
  const auto a = Gradients(plain, true);
  const auto b = Gradients(checkpointed, true);
  // Without the autocast in backward the recomputed blocks would run in
  // fp32 and differ by bf16's rounding (~1e-2).
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(a[i], b[i], /*rtol=*/1e-5, /*atol=*/1e-6));
  }
}

TEST_CASE("gradient checkpointing: without grad mode it is the plain call",
          "[cascade][checkpoint]") {
  auto [plain, checkpointed] = TwinStages(RecomputeAutocast());
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({1, 1, 8, 8, 8});
  const torch::Tensor views = torch::rand({1, 2, 16, 16});
  const torch::Tensor previous = torch::randn({1, 1, 8, 8, 8});
  const torch::Tensor t = torch::tensor({10});
  CHECK(torch::equal(plain->forward(x, t, views, previous),
                     checkpointed->forward(x, t, views, previous)));
}

TEST_CASE("Drr: Beer-Lambert along each view's beam", "[cascade][drr]") {
  torch::Tensor air = torch::full({4, 6, 8}, -1.0);
  CHECK(Drr(air, 0).sizes() == torch::IntArrayRef({4, 8}));  // D x W
  CHECK(Drr(air, 1).sizes() == torch::IntArrayRef({4, 6}));  // D x H
  CHECK(Drr(air, 0).abs().max().item<double>() == 0.0);
  const torch::Tensor full = Drr(torch::ones({4, 6, 8}), 1);
  CHECK(full.min().item<double>() ==
        Approx(1 - std::exp(-kOpticalDepth)).epsilon(1e-6));
  // A dense rod along H at (d, w) = (1, 2): the frontal view sees it as one
  // bright pixel, the lateral view as a bright row d = 1.
  torch::Tensor rod = air.clone();
  rod.index_put_({1, torch::indexing::Slice(), 2}, 1.0);
  const torch::Tensor frontal = Drr(rod, 0);
  CHECK(frontal[1][2].item<double>() ==
        Approx(1 - std::exp(-kOpticalDepth)).epsilon(1e-6));
  CHECK(frontal.sum().item<double>() == Approx(frontal[1][2].item<double>()));
  const torch::Tensor lateral = Drr(rod, 1);
  CHECK(lateral[1][0].item<double>() ==
        Approx(1 - std::exp(-kOpticalDepth / 8)).epsilon(1e-6));
  CHECK(lateral[0].abs().sum().item<double>() == 0.0);
}

TEST_CASE(
    "BackProjection: inverts Beer-Lambert and spreads each view along "
    "its beam",
    "[cascade][drr]") {
  // Views are square images; a cube keeps both at the volume's size.
  const std::vector<int64_t> size{6, 6, 6};
  // Constant along H (so along the frontal beam): the frontal view's
  // back-projection is the volume itself; a black view is air everywhere.
  const torch::Tensor volume =
      torch::linspace(-1, 0.8, 6).view({1, 1, 6}).expand({6, 6, 6});
  torch::Tensor bp = BackProjection(
      torch::stack({Drr(volume, 0), torch::zeros({6, 6})}).unsqueeze(0), size);
  REQUIRE(bp.sizes() == torch::IntArrayRef({1, 2, 6, 6, 6}));
  CHECK((bp[0][0] - volume).abs().max().item<double>() < 1e-4);
  CHECK(bp[0][1].max().item<double>() == Approx(-1.0));
  // A dense rod along W at (d, h) = (1, 2): the lateral view puts all its
  // density back on that row, none on slice 0.
  torch::Tensor rod = torch::full({6, 6, 6}, -1.0);
  rod.index_put_({1, 2, torch::indexing::Slice()}, 1.0);
  bp = BackProjection(torch::stack({Drr(rod, 0), Drr(rod, 1)}).unsqueeze(0),
                      size);
  CHECK((bp[0][1][1][2] - 1.0).abs().max().item<double>() < 1e-4);
  CHECK(bp[0][1][0].max().item<double>() == Approx(-1.0));
}

TEST_CASE(
    "synthetic patients: the views are radiographs of the CT volume (the "
    "physics loss of the truth is ~0, of another patient's volume is not)",
    "[cascade][drr][data]") {
  const std::string dir = TempDir("synthetic");
  // Not cubic. The views are the DRRs upsampled bilinearly to 32^2 and
  // stored as 8-bit PNG; area-averaging them back does not undo the
  // bilinear blur, which is what `own` measures (~4e-4, edges up to 0.05).
  REQUIRE(WriteSyntheticPatients(dir, 2, {8, 16, 16}, 32, 2, 3).ok());
  auto patients = ScanPatients(dir, 2);
  REQUIRE(patients.ok());
  REQUIRE(patients->size() == 2);
  CHECK((*patients)[0].views[0] ==
        dir + "/patient_0000/patient_0000_pa_drr.png");
  CHECK((*patients)[0].ct == dir + "/patient_0000/patient_0000.nii.gz");
  LoadOptions load;
  load.img_size = 32;
  load.volume_size = {8, 16, 16};
  auto a = LoadPatient((*patients)[0], load);
  auto b = LoadPatient((*patients)[1], load);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->views.sizes() == torch::IntArrayRef({2, 32, 32}));
  CHECK(a->volume.min().item<double>() >= -1.0);
  const double own =
      PhysicsLoss(a->volume.unsqueeze(0), a->views.unsqueeze(0)).item<double>();
  const double other =
      PhysicsLoss(b->volume.unsqueeze(0), a->views.unsqueeze(0)).item<double>();
  INFO("own " << own << " other " << other);
  CHECK(own < 1e-3);
  CHECK(other > 20 * own);
  // The PNG is Drr of the volume, resampled: compare at the view's size.
  const torch::Tensor frontal = Drr(a->volume.squeeze(0), 0);  // [8, 16]
  const torch::Tensor png =
      ViewAtVolumeSize(a->views.unsqueeze(0), 0, {8, 16, 16}).squeeze(0);
  CHECK((frontal - png).abs().max().item<double>() < 0.08);
}

TEST_CASE("patient folders: a missing view or CT, a volume of the wrong size",
          "[cascade][data]") {
  const std::string dir = TempDir("bad");
  REQUIRE(WriteSyntheticPatients(dir, 1, {8, 8, 8}, 16, 2, 1).ok());
  const std::string folder = dir + "/patient_0000";
  LoadOptions load;
  load.img_size = 16;
  load.volume_size = {16, 16, 16};
  auto wrong = LoadPatient(ScanPatients(dir, 2)->at(0), load);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message() ==
        folder + ": " + folder +
            "/patient_0000.nii.gz: wrong shape 1x8x8x8 (expected 1x16x16x16, "
            "as CxDxHxW); CT volumes must have the last stage's volume_size "
            "16x16x16");
  std::filesystem::remove(folder + "/patient_0000_lat_drr.png");
  CHECK(ScanPatients(dir, 1).ok());
  auto missing = ScanPatients(dir, 2);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() ==
        folder +
            ": missing the lateral view (patient_0000_lat_drr.png, "
            "patient_0000_lat.png or patient_0000_lateral.png, PNG or JPEG; "
            "xray_config.num_views is 2)");
  std::filesystem::rename(folder + "/patient_0000.nii.gz",
                          folder + "/patient_0000.npy");
  auto npy = ScanPatients(dir, 1);
  REQUIRE_FALSE(npy.ok());
  CHECK(npy.status().message().find("NumPy volumes are not read") !=
        std::string::npos);
  CHECK(ScanPatients(dir + "/absent", 2).status().message() ==
        "dataset_path " + dir + "/absent: no such directory");
}

TEST_CASE("VDiffusion: x0 from an exact output, and DDIM with an oracle",
          "[cascade][diffusion]") {
  for (bool v : {true, false}) {
    INFO("v-parameterization " << v);
    const VDiffusion diffusion(1000, v, 10);
    CHECK(diffusion.sampling_timesteps().front() == 999);
    CHECK(diffusion.sampling_timesteps().back() == 0);
    CHECK(diffusion.alpha_bar(999) < 1e-4);
    const torch::Tensor x0 = torch::rand({3, 1, 4, 4, 4}) * 1.6 - 0.8;
    const VDiffusion::Noised n =
        diffusion.AddNoise(x0, at::detail::createCPUGenerator(4));
    CHECK(torch::allclose(diffusion.PredictX0(n, n.target), x0, 1e-4, 1e-4));
    // An oracle that knows x0 returns the exact v (or eps) at every step.
    const auto oracle = [&](const torch::Tensor& x, const torch::Tensor& t) {
      const double ab = diffusion.alpha_bar(t[0].item<int64_t>());
      const double sa = std::sqrt(ab), sb = std::sqrt(1 - ab);
      const torch::Tensor eps = (x - sa * x0) / sb;
      return v ? sa * eps - sb * x0 : eps;
    };
    const torch::Tensor sample =
        diffusion.Sample(oracle, torch::randn_like(x0));
    CHECK(torch::allclose(sample, x0, 1e-3, 1e-3));
  }
  CHECK_THROWS_AS(VDiffusion(100, true, 101), worker::ConfigError);
}

// The guide's "Configuration Tips" block as written, // comments included.
const char kGuideConfig[] = R"({
  "xray_config": {
    "img_size": 512,
    "num_views": 2
  },
  "stage_configs": [
    {
      "name": "stage1",
      "volume_size": [64, 64, 64],
      "voxel_dim": 384,      // Can increase with more memory
      "vit_depth": 6,         // Can increase to 8
      "num_heads": 6
    }
  ],
  "training": {
    "batch_size": 8,          // 8 per GPU = 32 total
    "learning_rate": 1e-4,
    "num_epochs_per_stage": 100,
    "num_timesteps": 1000,
    "v_parameterization": true
  },
  "data": {
    "dataset_path": "./data/drr_patient_data",
    "augmentation": true,      // Enable for better generalization
    "cache_in_memory": false,  // True if dataset is small (<10GB)
    "num_workers": 4           // 4 per GPU
  }
}
)";

// Parses `args` (after argv[0]) with a fresh CascadeCli.
std::unique_ptr<CascadeCli> ParseCascade(std::vector<std::string> args) {
  args.insert(args.begin(), "cascade_trainer");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  auto cli = std::make_unique<CascadeCli>();
  cli->Parse(static_cast<int>(argv.size()), argv.data());
  return cli;
}

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = TempDir("config") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string ConfigError(std::vector<std::string> args) {
  try {
    ParseCascade(std::move(args));
  } catch (const worker::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("cascade config: the guide's JSON as written", "[cascade][config]") {
  const std::string path = WriteConfig("guide.json", kGuideConfig);
  auto cli = ParseCascade({"--config", path});
  const CascadeOptions& o = cli->options();
  CHECK(o.xray.img_size == 512);
  CHECK(o.xray.num_views == 2);
  REQUIRE(cli->stages().size() == 1);
  const StageConfig& s = cli->stages()[0];
  CHECK(s.name == "stage1");
  CHECK(s.volume_size == std::vector<int64_t>{64, 64, 64});
  CHECK(s.voxel_dim == 384);
  CHECK(s.vit_depth == 6);
  CHECK(s.num_heads == 6);
  CHECK(s.patch_size == 2);  // not in the guide: our default
  CHECK(o.batch_size == 8);
  CHECK(o.learning_rate == Approx(1e-4));
  CHECK(cli->common().epochs == 100);
  CHECK(o.num_timesteps == 1000);
  CHECK(o.v_parameterization);
  CHECK(o.dataset_path == "./data/drr_patient_data");
  CHECK(o.augmentation);
  CHECK_FALSE(o.cache_in_memory);
  CHECK(cli->common().num_workers == 4);

  // A flag beats the file: --voxel_dim for every stage, --stages replaces
  // the stage list.
  auto flags =
      ParseCascade({"--config", path, "--voxel_dim", "48", "--lr", "0.01"});
  CHECK(flags->stages()[0].voxel_dim == 48);
  CHECK(flags->stages()[0].vit_depth == 6);
  CHECK(flags->options().learning_rate == Approx(0.01));
  auto sized = ParseCascade({"--config", path, "--stages", "8,16"});
  REQUIRE(sized->stages().size() == 2);
  CHECK(sized->stages()[1].name == "stage2");
  CHECK(sized->stages()[1].volume_size == std::vector<int64_t>{16, 16, 16});
}

TEST_CASE("cascade config: the memory-saving keys and the written config",
          "[cascade][config]") {
  const std::string path =
      WriteConfig("saving.json",
                  R"({"training": {"gradient_checkpointing": true,
                       "mixed_precision": "fp16", "accumulation_steps": 2},
          "stage_configs": [{"name": "coarse", "volume_size": 8},
                            {"name": "fine", "volume_size": [8, 16, 16],
                             "physics_weight": 0.5}]})");
  auto cli = ParseCascade({"--config", path});
  CHECK(cli->options().gradient_checkpointing);
  CHECK(cli->common().mixed_precision == "fp16");
  CHECK(cli->common().gradient_accumulation_steps == 2);
  REQUIRE(cli->stages().size() == 2);
  CHECK(cli->stages()[0].volume_size == std::vector<int64_t>{8, 8, 8});
  CHECK(cli->stages()[1].name == "fine");
  CHECK(cli->stages()[1].physics_weight == Approx(0.5));
  CHECK(cli->stages()[0].physics_weight == Approx(0.3));
  // What --make_synthetic writes reads back to the same stages.
  const std::string written =
      WriteConfig("written.json", cli->GuideConfig("data/x").dump(2));
  auto again = ParseCascade({"--config", written});
  REQUIRE(again->stages().size() == 2);
  CHECK(again->stages()[1].volume_size == std::vector<int64_t>{8, 16, 16});
  CHECK(again->stages()[1].name == "fine");
  CHECK(again->options().dataset_path == "data/x");
  CHECK(again->common().mixed_precision == "fp16");
}

TEST_CASE("cascade config: bad keys and values name the file and the line",
          "[cascade][config]") {
  const std::string typo =
      WriteConfig("typo.json",
                  "{\n  \"stage_configs\": [\n    {\"name\": \"stage1\",\n"
                  "     \"vit_dept\": 6}\n  ]\n}\n");
  CHECK(ConfigError({"--config", typo}) ==
        typo +
            ":4: unknown key 'stage_configs[0].vit_dept' (did you mean "
            "'vit_depth'?)");
  const std::string training = WriteConfig(
      "training.json", "{\n  \"training\": {\n    \"batch_sise\": 8\n  }\n}\n");
  CHECK(ConfigError({"--config", training}) ==
        training +
            ":3: unknown key 'training.batch_sise' (did you mean "
            "'batch_size'?)");
  const std::string size = WriteConfig(
      "size.json", "{\"stage_configs\": [{\"volume_size\": [64, 64]}]}\n");
  CHECK(ConfigError({"--config", size}) ==
        size +
            ":1: key 'stage_configs[0].volume_size': expected [D, H, W] "
            "(or one size for a cube)");
  const std::string shrink = WriteConfig(
      "shrink.json",
      "{\"stage_configs\": [{\"volume_size\": 16},\n {\"volume_size\": 8}]}\n");
  CHECK(ConfigError({"--config", shrink}) ==
        shrink +
            ":2: stage_configs[1] (stage2): volume_size 8x8x8 is smaller "
            "than the previous stage's 16x16x16 (stages go from coarse "
            "to fine)");
  const std::string heads = WriteConfig(
      "heads.json",
      "{\"stage_configs\": [{\"volume_size\": 8, \"voxel_dim\": 30, "
      "\"num_heads\": 4}]}\n");
  CHECK(ConfigError({"--config", heads}) ==
        heads +
            ":1: stage_configs[0] (stage1): num_heads 4 must divide "
            "voxel_dim 30");
  CHECK(ConfigError({"--stages", "8,12", "--patch_size", "8"}) ==
        "--stages: stage 1 (stage1): volume_size 8x8x8 must be a multiple of "
        "patch_size 8 and at least two patches in every axis");
}

TEST_CASE(
    "cascade precision: ACCELERATE_MIXED_PRECISION unless a flag or the "
    "config says otherwise",
    "[cascade][config]") {
  ::setenv("ACCELERATE_MIXED_PRECISION", "fp16", 1);
  CHECK(ParseCascade({})->common().mixed_precision == "fp16");
  CHECK(ParseCascade({"--mixed_precision", "bf16"})->common().mixed_precision ==
        "bf16");
  CHECK(ParseCascade({"--amp", "no"})->common().mixed_precision.empty());
  const std::string path =
      WriteConfig("no.json", "{\"training\": {\"mixed_precision\": \"no\"}}\n");
  CHECK(ParseCascade({"--config", path})->common().mixed_precision == "no");
  ::setenv("ACCELERATE_MIXED_PRECISION", "fp8", 1);
  CHECK(ConfigError({}).find("ACCELERATE_MIXED_PRECISION=fp8") == 0);
  ::unsetenv("ACCELERATE_MIXED_PRECISION");
  CHECK(ParseCascade({})->common().mixed_precision.empty());
}

}  // namespace
}  // namespace ddprun::examples
