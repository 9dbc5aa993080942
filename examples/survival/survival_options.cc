#include "examples/survival/survival_options.h"

#include "ddprun/worker/worker.h"
#include "examples/frame/trainer_support.h"
#include "examples/survival/resnet3d.h"
#include "examples/survival/survival_data.h"

namespace ddprun::examples {
namespace {

std::vector<ForeignFlag> SurvivalForeignFlags() {
  return {
      {"output", ForeignFlag::Arity::kOne,
       "no separate .pth: the final model is the last checkpoint "
       "<checkpoint_dir>/ckpt-<step>.pt and the best by validation C-index "
       "is best.pt beside it (LibTorch archives; --resume_from takes both)"},
  };
}

}  // namespace

SurvivalCli::SurvivalCli()
    : cli_("survival_trainer: 3D ResNet + Cox partial likelihood on NIfTI "
           "volumes listed in a CSV (image,time,event or the guide's NIFTI "
           "path,time,event,Fold_1). Runs alone or under "
           "ddprun/torchrun (one process per rank).",
           {"runs/survival", /*epochs=*/4, /*synthetic_n=*/160}) {
  SurvivalOptions& opt = options_;
  CLI::App& app = cli_.app();
  cli_.AddDataOptions("--csv_path", &opt.csv_path,
                      "CSV listing the volumes: columns image (or the guide's "
                      "'NIFTI path'), time, event and optionally the fold "
                      "column; or a data root holding the guide's dataset.csv",
                      &opt.val_fraction);
  app.add_option("--resnet", opt.resnet, "Backbone depth")
      ->check(CLI::IsMember(ResNet3dDepths()));
  app.add_option("--width", opt.width, "Stem channels (stages: w, 2w, 4w, 8w)")
      ->check(CLI::PositiveNumber);
  app.add_option("--image_size", opt.image_size,
                 "Volume size D H W fed to the network")
      ->expected(3);
  cli_.AddBatchSize(&opt.batch_size,
                    "TOTAL batch over all ranks (per rank = total / world "
                    "size)");
  app.add_option("--learning_rate", opt.learning_rate, "Adam learning rate");
  app.add_option("--weight_decay", opt.weight_decay, "Adam weight decay");
  app.add_flag(
      "--use_smart_cache", opt.use_smart_cache,
      "Train each epoch on a cached fraction refreshed in the background");
  app.add_option("--cache_rate", opt.cache_rate,
                 "Fraction of the training set cached")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--replace_rate", opt.replace_rate,
                 "Fraction of the cache replaced each epoch")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--synthetic_size", opt.synthetic_size,
                 "Edge of the volumes written by --make_synthetic");
  cli_.AddGradientCheckpointing(
      &opt.gradient_checkpointing,
      "Activation checkpointing: keep only the input of the stem and of each "
      "residual block, recompute the rest in backward (less memory, ~1/3 "
      "more compute, same gradients)");
  cli_.AddClipGrad(&opt.clip_grad);
  app.add_option("--fold_column", opt.fold_column,
                 "CSV column with each row's fold (the guide's Fold_1): rows "
                 "with --train_fold train, rows with --val_fold validate; "
                 "without the column, --val_fraction splits");
  app.add_option("--train_fold", opt.train_fold,
                 "Value of --fold_column for training rows");
  app.add_option("--val_fold", opt.val_fold,
                 "Value of --fold_column for validation rows");
  cli_.AddForeignFlags(SurvivalForeignFlags());
}

std::optional<int> SurvivalCli::Parse(int argc, char** argv) {
  return cli_.Parse(argc, argv);
}

bool SurvivalCli::MakeSynthetic() {
  const CommonOptions& common = cli_.common();
  return cli_.MakeSynthetic(
      [&] {
        return WriteSyntheticSurvival(common.make_synthetic,
                                      common.synthetic_n,
                                      options_.synthetic_size, common.seed);
      },
      "subjects",
      "survival.csv and " + common.make_synthetic +
          "/dataset.csv (the guide's columns: NIFTI path, time, event, "
          "Fold_1)");
}

void SurvivalCli::ResolveData() {
  TrainerCli::Require("--csv_path", options_.csv_path);
  options_.csv_path = ValueOrThrow(ResolveSurvivalCsv(options_.csv_path));
}

}  // namespace ddprun::examples
