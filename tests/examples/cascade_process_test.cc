// What only cascade_trainer does, run as a user would: the guide-shaped
// config it writes, a debug run with its TensorBoard events and pictures,
// its own bad data and config files; with the launcher built: the guide's
// torchrun (one and two nodes) and accelerate launch lines and
// --resume_from a stage's best checkpoint. What every trainer promises
// (--help, re-run and resume, kill -9) is trainer_contract_test.cc.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "ddprun_catch.h"

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

// Patients of the default sizes (CT 16^3, views 32^2), with the config.
std::string SyntheticConfig() {
  return SyntheticData("cascade", "--n 24 --seed 3", "config.json");
}
// The default synthetic data set (40 patients), for the learning test.
std::string DefaultSyntheticConfig() {
  return SyntheticData("cascade", "--seed 3", "config.json");
}
std::string DataDir() { return DirOf(SyntheticConfig()); }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Scalar tags and image tags of an event file.
std::set<std::string> EventTags(const std::string& file) {
  std::set<std::string> tags;
  // Kept in a local: a range-for over ReadEvents(file)["records"] would
  // iterate a member of a destroyed temporary.
  const nlohmann::json events = ReadEvents(file);
  for (const auto& record : events["records"]) {
    if (!record.contains("values")) continue;
    for (const auto& v : record["values"]) {
      tags.insert(v["tag"].get<std::string>());
    }
  }
  return tags;
}

TEST_CASE(
    "cascade_trainer: --make_synthetic writes patient folders and a config "
    "in the guide's shape",
    "[cascade][data]") {
  const std::string dir = DataDir();
  const nlohmann::json config = ReadJson(SyntheticConfig());
  CHECK(config["xray_config"]["img_size"] == 32);
  CHECK(config["xray_config"]["num_views"] == 2);
  REQUIRE(config["stage_configs"].size() == 2);
  CHECK(config["stage_configs"][0]["name"] == "stage1");
  CHECK(config["stage_configs"][0]["volume_size"] ==
        nlohmann::json::array({8, 8, 8}));
  CHECK(config["stage_configs"][1]["volume_size"] ==
        nlohmann::json::array({16, 16, 16}));
  CHECK(config["stage_configs"][1]["voxel_dim"] == 32);
  CHECK(config["training"]["num_epochs_per_stage"] == 24);
  CHECK(config["training"]["num_timesteps"] == 1000);
  CHECK(config["training"]["v_parameterization"] == true);
  CHECK_FALSE(config["training"].contains("mixed_precision"));
  CHECK(config["data"]["dataset_path"] == dir);
  int patients = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_directory()) continue;
    ++patients;
    const std::string id = e.path().filename();
    CHECK(PngSize(e.path().string() + "/" + id + "_pa_drr.png") ==
          std::make_pair(32, 32));
    CHECK(PngSize(e.path().string() + "/" + id + "_lat_drr.png") ==
          std::make_pair(32, 32));
    CHECK(std::filesystem::file_size(e.path().string() + "/" + id + ".nii.gz") >
          100);
  }
  CHECK(patients == 24);
}

TEST_CASE(
    "cascade_trainer: a debug run writes metrics, TensorBoard scalars and "
    "slices of the reconstruction",
    "[cascade][train]") {
  const std::string out = FreshDir("cascade_debug");
  CommandResult r =
      RunCommand(Bin("cascade_trainer") + " --config " + SyntheticConfig() +
                     " --output_dir " + out + " --debug --progress_interval 1",
                 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("cascade: 8 train / 4 val patients, 2 views of 32^2, "
                      "stages 8x8x8 -> 16x16x16; batch 4 per rank x 1 ranks "
                      "x 1 accumulation = 4, 1000 timesteps (3-step DDIM "
                      "sampling), v-prediction, fp32") != std::string::npos);
  CHECK(r.output.find("stage 1/1 (stage1): volumes 8x8x8") !=
        std::string::npos);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  const nlohmann::json& m = metrics[0];
  CHECK(m["stage_name"] == "stage1");
  CHECK(m["step"] == 2);  // 8 patients / batch 4
  CHECK(m["val_cases"] == 4);
  for (const char* key :
       {"val_psnr", "val_ssim", "val_psnr_mean_volume", "val_loss",
        "val_physics_loss", "val_recon_physics_loss", "val_truth_physics_loss",
        "train_physics_loss", "train_diffusion_loss", "samples_per_s"}) {
    INFO(key);
    CHECK(std::isfinite(m[key].get<double>()));
  }
  // The synthetic views are radiographs of the volumes.
  CHECK(m["val_truth_physics_loss"].get<double>() < 1e-3);
  CHECK(m["frozen_stages_changed"] == false);
  CHECK(std::filesystem::exists(out + "/checkpoints/stage1_best.pt"));
  const auto events = EventFiles(out);
  REQUIRE(events.size() == 1);
  const std::set<std::string> tags = EventTags(events[0]);
  for (const char* tag :
       {"train/loss", "train/samples_per_s", "train/epoch_loss",
        "train/epoch_physics_loss", "train/epoch_diffusion_loss", "val/psnr",
        "val/psnr_mean_volume", "val/physics_loss", "stage1/slices",
        "stage1/physics"}) {
    INFO(tag);
    CHECK(tags.count(tag) == 1);
  }
  const auto slices = PngSize(out + "/images/stage1_slices_step00000002.png");
  CHECK(slices.first > 300);
  CHECK(PngSize(out + "/images/stage1_physics_step00000002.png").first > 300);
  CHECK(PngSize(out + "/training_curves.png").first > 0);
}

TEST_CASE("cascade_trainer: bad patient folders stop the run with one line",
          "[cascade][errors]") {
  // CT volumes of 8^3 where the last stage wants 16^3.
  const std::string small =
      SyntheticData("cascade", "--n 16 --stages 8 --seed 2", "config.json");
  const std::string small_dir = DirOf(small);
  CommandResult wrong =
      RunCommand(Bin("cascade_trainer") + " --dataset_path " + small_dir +
                     " --debug --output_dir " + FreshDir("cascade_wrong_size"),
                 120);
  CHECK(wrong.exit_code == 2);
  CHECK(wrong.output.find("wrong shape 1x8x8x8 (expected 1x16x16x16, as "
                          "CxDxHxW); CT volumes must have the last stage's "
                          "volume_size 16x16x16") != std::string::npos);

  const std::string dir = FreshDir("cascade_missing_view");
  REQUIRE(RunCommand(Bin("cascade_trainer") + " --make_synthetic " + dir +
                         " --n 3 --stages 8",
                     60)
              .exit_code == 0);
  std::filesystem::remove(dir + "/patient_0001/patient_0001_lat_drr.png");
  // Without --num_views 1 that is an error (trainer_contract_test.cc); one
  // frontal view is enough for a single-view run.
  CommandResult single =
      RunCommand(Bin("cascade_trainer") + " --config " + dir +
                     "/config.json --num_views 1 "
                     "--debug --output_dir " +
                     dir + "/out",
                 120);
  INFO(single.output);
  CHECK(single.exit_code == 0);
}

TEST_CASE("cascade_trainer: a misspelt config key names the file and line",
          "[cascade][errors]") {
  const std::string dir = FreshDir("cascade_bad_config");
  const std::string config = dir + "/config.json";
  WriteText(config,
            "{\n  \"stage_configs\": [\n    {\"name\": \"stage1\", "
            "\"volume_size\": [8, 8, 8],\n     \"num_head\": 2}\n  ]\n}\n");
  CommandResult r = RunCommand(Bin("cascade_trainer") + " --config " + config +
                                   " --dataset_path " + DataDir(),
                               60);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(config +
                      ":4: unknown key 'stage_configs[0].num_head' (did you "
                      "mean 'num_heads'?)") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::examples::testing

#ifdef DDPRUN_LAUNCHER_BIN
namespace ddprun::examples::testing {
namespace {

// The learning bars of the stage whose epochs are metrics[first, first + n)
// (see the test below), each as passed or not.
struct StageBars {
  bool beats_mean_volume = false;    // last epoch's PSNR > the mean volume's
  bool gains_2db = false;            // last PSNR > first epoch's + 2 dB
  bool halves_physics_loss = false;  // last radiograph loss < first's / 2
};
StageBars BarsOf(const std::vector<nlohmann::json>& metrics, size_t first,
                 size_t n) {
  const nlohmann::json& begin = metrics.at(first);
  const nlohmann::json& end = metrics.at(first + n - 1);
  StageBars bars;
  bars.beats_mean_volume = end["val_psnr"].get<double>() >
                           end["val_psnr_mean_volume"].get<double>();
  bars.gains_2db =
      end["val_psnr"].get<double>() > begin["val_psnr"].get<double>() + 2.0;
  bars.halves_physics_loss =
      end["val_recon_physics_loss"].get<double>() <
      0.5 * begin["val_recon_physics_loss"].get<double>();
  return bars;
}

// A model that never learns (--learning_rate 0; 4 epochs a stage suffice,
// nothing changes) passes none of the learning test's bars in either stage.
TEST_CASE(
    "cascade_trainer: a run with --learning_rate 0 fails every learning bar",
    "[cascade][ddprun][train]") {
  const std::string out = FreshDir("cascade_lr0");
  CommandResult r = RunCommand(
      Launch("") + Bin("cascade_trainer") + " --config " +
          DefaultSyntheticConfig() + " --output_dir " + out +
          " --epochs 4 --learning_rate 0",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 8);
  for (size_t first : {0, 4}) {
    INFO(metrics[first].dump() << "\n" << metrics[first + 3].dump());
    const StageBars bars = BarsOf(metrics, first, 4);
    CHECK_FALSE(bars.beats_mean_volume);
    CHECK_FALSE(bars.gains_2db);
    CHECK_FALSE(bars.halves_physics_loss);
  }
}

// The default run under the guide's torchrun line (as ddprun), on the
// default synthetic data set (40 patients) and the config --make_synthetic
// wrote: both stages, 24 epochs (96 steps) each. The sampled reconstruction
// learns its task: at the end of each stage it beats the mean training volume
// (the baseline the trainer prints; measured +1.8 dB at 8^3, +2.9 dB at 16^3),
// gains over the stage's first epoch, and its radiographs come at least
// twice as close to the input views.
TEST_CASE(
    "cascade_trainer: the guide's torchrun line trains both stages on 2 ranks "
    "and each stage's reconstruction beats the mean training volume",
    "[cascade][ddprun][train]") {
  const std::string out = FreshDir("cascade_2ranks");
  CommandResult r =
      RunCommand(Launch("") + Bin("cascade_trainer") + " --config " +
                     DefaultSyntheticConfig() + " --wandb --output_dir " + out +
                     " --progress_interval 2",
                 600);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(LinesWith(r.output, "note: --wandb: ").size() == 1);
  CHECK(r.output.find("x 2 ranks") != std::string::npos);
  CHECK(LinesWith(r.output, "samples/s").size() >= 2);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 48);
  const nlohmann::json& last = metrics.back();
  CHECK(metrics[23]["stage"] == 1);
  CHECK(last["stage"] == 2);
  CHECK(last["world_size"] == 2);
  CHECK(last["frozen_stages_changed"] == false);
  for (size_t first : {0, 24}) {
    INFO(metrics[first].dump() << "\n" << metrics[first + 23].dump());
    const StageBars bars = BarsOf(metrics, first, 24);
    CHECK(bars.beats_mean_volume);
    CHECK(bars.gains_2db);
    CHECK(bars.halves_physics_loss);
  }
  CHECK(std::filesystem::exists(out + "/checkpoints/stage1_best.pt"));
  CHECK(std::filesystem::exists(out + "/checkpoints/stage2_best.pt"));
}

TEST_CASE(
    "cascade_trainer: the guide's accelerate launch line (ddprun-accelerate "
    "--mixed_precision=fp16) trains in reduced precision",
    "[cascade][ddprun][accelerate]") {
  const std::string out = FreshDir("cascade_accelerate");
  // ddprun-accelerate lies beside the launcher under test (this build's, or
  // the prebuilt one the LibTorch 2.6 leg names), not beside the trainers.
  const std::string accelerate =
      (std::filesystem::path(DDPRUN_LAUNCHER_BIN).parent_path() /
       "ddprun-accelerate")
          .string();
  CommandResult r = RunCommand(
      accelerate + " --multi_gpu --num_processes=2 --mixed_precision=fp16 " +
          Bin("cascade_trainer") + " --config " + SyntheticConfig() +
          " --output_dir " + out + " --debug --gradient_checkpointing",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // fp16 autocast with loss scaling where this LibTorch's CPU autocast has
  // float16 (2.2+), else bf16 with a note.
  CHECK((r.output.find("fp16 autocast with dynamic loss scaling") !=
             std::string::npos ||
         r.output.find("bf16 autocast") != std::string::npos));
  CHECK(r.output.find(", gradient checkpointing") != std::string::npos);
  CHECK(ReadMetrics(out).size() == 1);
}

TEST_CASE(
    "cascade_trainer: the guide's two-node torchrun lines (node 0 and node 1)",
    "[cascade][ddprun][multinode]") {
  const std::string out = FreshDir("cascade_two_nodes");
  const std::string port = std::to_string(FreeLoopbackPort());
  auto node = [&](int rank) {
    return std::string(DDPRUN_LAUNCHER_BIN) +
           " --nproc_per_node=1 --nnodes=2 --node_rank=" +
           std::to_string(rank) +
           " --master_addr=127.0.0.1 --master_port=" + port + " --no_python " +
           Bin("cascade_trainer") + " --config " + SyntheticConfig() +
           " --output_dir " + out + " --debug";
  };
  CommandResult r = RunCommand(
      "(" + node(0) + " > " + out + "/node0.log 2>&1 & p=$!; " + node(1) +
          " > " + out + "/node1.log 2>&1; one=$?; wait $p; zero=$?; cat " +
          out + "/node0.log " + out + "/node1.log; exit $((zero + one)))",
      300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["world_size"] == 2);
}

}  // namespace
}  // namespace ddprun::examples::testing
#endif  // DDPRUN_LAUNCHER_BIN
