// Each trainer's small run, shared by the contract test and the trainers'
// own process tests: the trainer, a small synthetic data set (written once
// per test binary) and a model small enough for a few seconds an epoch; no
// --output_dir or --epochs.
#pragma once

#include <string>

#include "tests/examples/trainer_run.h"

namespace ddprun::examples::testing {

inline std::string SmallSurvival() {
  return Bin("survival_trainer") + " --csv_path " +
         SyntheticData("survival", "--n 48 --synthetic_size 16 --seed 3",
                       "survival.csv") +
         " --image_size 16 16 16 --progress_interval 1";
}

inline std::string SmallSegmentation() {
  return Bin("segmentation_trainer") + " --data_path " +
         SyntheticData("segmentation", "--n 40 --image_size 32 --seed 5",
                       "prompts.jsonl") +
         " --image_size 32 --progress_interval 1";
}

inline std::string SmallVqa() {
  return Bin("vqa_trainer") + " --data_path " +
         SyntheticData("vqa", "--n 64 --image_size 32 --seed 7", "vqa.jsonl") +
         " --image_size 32 --progress_interval 1";
}

// One stage of 8^3 volumes: its best checkpoint is stage1_best.pt, the
// name the guides resume from. The default width (8): the resumed third
// epoch must beat the best one, and with width 4 under x0-prediction the
// validation PSNR went 16.8, 17.6, 17.56 (width 8: 18.3, 18.9, 19.1).
inline std::string SmallDdpm() {
  return Bin("ddpm_trainer") + " --csv_path " +
         SyntheticData("ddpm", "--n 12 --synthetic_size 8 --seed 2",
                       "cases.csv") +
         " --stages 8 --gradient_accumulation_steps 1 --progress_interval 1";
}

// One stage of 8^3 volumes on patients written for it (best checkpoint:
// stage1_best.pt).
inline std::string SmallCascade() {
  const std::string config =
      SyntheticData("cascade", "--n 16 --stages 8 --seed 2", "config.json");
  return Bin("cascade_trainer") + " --dataset_path " + DirOf(config) +
         " --stages 8 --voxel_dim 16 --batch_size 2 --progress_interval 1";
}

}  // namespace ddprun::examples::testing
