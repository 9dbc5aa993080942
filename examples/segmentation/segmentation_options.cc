#include "examples/segmentation/segmentation_options.h"

#include <cstdio>

#include "ddprun/worker/worker.h"
#include "examples/segmentation/segmentation_data.h"

namespace ddprun::examples {

namespace dw = ddprun::worker;

SegmentationCli::SegmentationCli()
    : cli_("segmentation_trainer: text-prompted 2D segmentation (UNet with a "
           "prompt-conditioned bottleneck) on PNG/JPEG images + masks: the "
           "guide's data root (annotations/*.csv, images_and_masks/) or a "
           "JSONL {image, mask, prompt}. Runs alone or under ddprun/torchrun.",
           {"runs/segmentation", /*epochs=*/8, /*synthetic_n=*/192}) {
  SegOptions& opt = options_;
  CLI::App& app = cli_.app();
  cli_.AddDataOptions(
      "--data_path", &opt.data_path,
      "The data: the guide's data root (DIR with annotations/*.csv and "
      "images_and_masks/; also --data_root), or a JSONL with one {image, "
      "mask, prompt} object per line (or a DIR holding prompts.jsonl)",
      &opt.val_fraction);
  app.add_option(
         "--image_size", opt.image_size,
         "Images and masks are resized to this square size (multiple of 8)")
      ->check(CLI::PositiveNumber);
  app.add_option("--width", opt.width, "UNet channels of the first level")
      ->check(CLI::PositiveNumber);
  cli_.AddBatchSize(&opt.batch_size, "Batch PER RANK (per GPU)");
  app.add_option("--learning_rate", opt.learning_rate,
                 "Base Adam learning rate, multiplied by the world size");
  app.add_flag("--no_lr_scaling", opt.no_lr_scaling,
               "Use --learning_rate as is, not scaled by the world size");
  app.add_option("--dice_weight", opt.dice_weight,
                 "Weight of the Dice term next to BCE");
  app.add_option("--prompt_length", opt.prompt_length,
                 "Prompt tokens kept (padded/cut)");
  // prs-med-segmentation.md's train_prs_med.py names.
  cli_.AddAliases({{"data_root", "data_path", ""},
                   {"grad_accum_steps", "gradient_accumulation_steps", ""}});
  cli_.AddForeignFlags(
      {{"dist_url", ForeignFlag::Arity::kOne,
        "the process group is set up from the launcher's environment "
        "(MASTER_ADDR, MASTER_PORT or ddprun's rendezvous), like env://"}});
}

std::optional<int> SegmentationCli::Parse(int argc, char** argv) {
  if (auto code = cli_.Parse(argc, argv)) return code;
  if (options_.image_size % 8 != 0)
    throw dw::ConfigError("--image_size must be a multiple of 8");
  return std::nullopt;
}

bool SegmentationCli::MakeSynthetic() {
  const CommonOptions& common = cli_.common();
  if (cli_.MakeSynthetic(
          [&] {
            return WriteSyntheticSegmentation(common.make_synthetic,
                                              common.synthetic_n,
                                              options_.image_size, common.seed);
          },
          "images", "prompts.jsonl")) {
    std::printf(
        "the same images in the guide's layout: --data_root %s "
        "(annotations/lesions.csv, images_and_masks/lesions/)\n",
        common.make_synthetic.c_str());
    return true;
  }
  TrainerCli::Require("--data_path", options_.data_path);
  return false;
}

}  // namespace ddprun::examples
