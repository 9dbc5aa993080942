// What only segmentation_trainer does, run as a user would: a short run that
// must beat chance, bad files, LR scaling, 2 ranks. What every trainer
// promises (--help, re-run and resume, kill -9) is trainer_contract_test.cc.
#include <filesystem>
#include <string>

#include "ddprun_catch.h"

#include "tests/examples/small_runs.h"
#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {
namespace {

std::string SyntheticJsonl() {
  return SyntheticData("segmentation", "--n 128 --seed 5", "prompts.jsonl");
}

std::string Trainer(const std::string& out) {
  return Bin("segmentation_trainer") + " --data_path " + SyntheticJsonl() +
         " --output_dir " + out + " --progress_interval 1";
}

// Predicting nothing scores Dice 0 and predicting everything about 0.1; both
// lesions together about 0.67. The bar is the untrained model's Dice (the
// same command with --lr 0 for one epoch) plus kSegmentationDiceGain.
bool Learned(const nlohmann::json& last, const nlohmann::json& first,
             double untrained_dice) {
  return last["val_dice"].get<double>() >
             untrained_dice + kSegmentationDiceGain &&
         last["val_loss"].get<double>() < first["val_loss"].get<double>();
}

double UntrainedDice(const std::string& tag, const std::string& flags = "") {
  const std::string out = FreshDir(tag);
  return UntrainedMetrics(Trainer(out) + " --epochs 1 --image_size 48" + flags,
                          out, 120)["val_dice"]
      .get<double>();
}

TEST_CASE(
    "segmentation_trainer: a short run alone segments the lesions (Dice "
    "above the untrained model's)",
    "[segmentation][train]") {
  const std::string out = FreshDir("seg_alone");
  CommandResult r =
      RunCommand(Trainer(out) + " --epochs 4 --image_size 48", 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("lr 0.001000") !=
        std::string::npos);  // world 1: unscaled
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 4);
  CHECK(metrics.back()["val_images"] == 26);
  const double untrained = UntrainedDice("seg_alone_untrained");
  INFO("last epoch " << metrics.back().dump() << ", untrained Dice "
                     << untrained);
  CHECK(Learned(metrics.back(), metrics.front(), untrained));
}

// A model that never learns (--lr 0) fails the bar of the run above.
TEST_CASE("segmentation_trainer: a run with --lr 0 fails the learning bar",
          "[segmentation][train]") {
  const std::string out = FreshDir("seg_lr0");
  CommandResult r =
      RunCommand(Trainer(out) + " --epochs 4 --image_size 48 --lr 0", 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 4);
  const double untrained = UntrainedDice("seg_lr0_untrained");
  INFO("last epoch " << metrics.back().dump() << ", untrained Dice "
                     << untrained);
  CHECK_FALSE(Learned(metrics.back(), metrics.front(), untrained));
}

TEST_CASE(
    "segmentation_trainer: bad JSONL lines and image files fail naming them",
    "[segmentation][errors]") {
  const std::string dir = FreshDir("seg_bad");
  const std::string data =
      std::filesystem::path(SyntheticJsonl()).parent_path();
  // Where --make_synthetic puts images 0 (val split) and 1 (train split).
  const std::string kImage0 = "images_and_masks/lesions/val_images/0000.png";
  const std::string kMask0 = "images_and_masks/lesions/val_masks/0000.png";
  const std::string kImage1 = "images_and_masks/lesions/train_images/0001.png";
  const std::string kMask1 = "images_and_masks/lesions/train_masks/0001.png";
  auto run = [&](const std::string& text) {
    WriteText(dir + "/p.jsonl", text);
    return RunCommand(Bin("segmentation_trainer") + " --data_path " + dir +
                          "/p.jsonl --debug --output_dir " + dir + "/out",
                      60);
  };
  const std::string good = "{\"image\": \"" + data + "/" + kImage0 +
                           "\", \"mask\": \"" + data + "/" + kMask0 +
                           "\", \"prompt\": \"lesion in the upper left\"}\n";
  CommandResult broken = run(good + "{\"image\": \n");
  CHECK(broken.exit_code == 2);
  CHECK(broken.output.find(dir + "/p.jsonl:2: invalid JSON") !=
        std::string::npos);

  CommandResult no_prompt =
      run(good + "{\"image\": \"a.png\", \"mask\": \"b.png\"}\n");
  CHECK(no_prompt.exit_code == 2);
  CHECK(no_prompt.output.find(
            "p.jsonl:2: missing or non-string field 'prompt'") !=
        std::string::npos);

  std::string many;
  for (int i = 0; i < 6; ++i) many += good;
  // A line naming a missing mask: trainer_contract_test.cc.

  WriteText(dir + "/corrupt.png", "\x89PNG\r\n\x1a\n truncated");
  CommandResult corrupt =
      run(many + "{\"image\": \"corrupt.png\", \"mask\": \"" + data + "/" +
          kMask1 + "\", \"prompt\": \"x\"}\n");
  CHECK(corrupt.exit_code == 2);
  // The JSONL line that names the image (line 7) and the image itself.
  CHECK(corrupt.output.find(dir + "/p.jsonl:7: " + dir +
                            "/corrupt.png: cannot decode image") !=
        std::string::npos);
}

#ifdef DDPRUN_LAUNCHER_BIN
TEST_CASE("segmentation_trainer: 2 ranks scale the LR and aggregate validation",
          "[segmentation][ddprun]") {
  const std::string out = FreshDir("seg_2ranks");
  CommandResult r = RunCommand(Launch("") + Trainer(out) + " --epochs 2", 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("lr 0.002000") != std::string::npos);
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 2);
  CHECK(metrics.back()["val_images"] == 26);  // 13 per rank, summed
  CHECK(metrics.back()["world_size"] == 2);

  const std::string fixed = FreshDir("seg_2ranks_fixed");
  CommandResult f = RunCommand(
      Launch("") + Trainer(fixed) + " --epochs 1 --no_lr_scaling", 240);
  CHECK(f.output.find("lr 0.001000") != std::string::npos);
}

#endif  // DDPRUN_LAUNCHER_BIN

// prs-med-segmentation.md's 4-GPU line, run alone: --num_epochs,
// --checkpoint_dir, --learning_rate; 32 training images in micro-batches
// of 4, 2 per step: 4 steps.
TEST_CASE("segmentation_trainer: the guide's --checkpoint_dir and accumulation",
          "[segmentation][frame]") {
  const std::string out = FreshDir("seg_guide_dirs");
  CommandResult r = RunCommand(
      SmallSegmentation() + " --output_dir " + out +
          " --batch_size 4 --learning_rate 5e-5 --num_epochs 1 --num_workers "
          "1 --checkpoint_dir " +
          out + "/ckpts --gradient_accumulation_steps 2",
      120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("batch 4 per rank x accumulation 2, lr 0.000050") !=
        std::string::npos);
  CHECK(NewestCheckpointStep(out + "/ckpts") == 4);
  CHECK(std::filesystem::exists(out + "/ckpts/best.pt"));
  CHECK(!std::filesystem::exists(out + "/checkpoints"));
  auto metrics = ReadMetrics(out);
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0]["step"] == 4);
}

}  // namespace
}  // namespace ddprun::examples::testing
