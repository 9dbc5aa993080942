#include "examples/common/trainer_cli.h"

#include <cstdio>

#include "ddprun/worker/errors.h"

namespace ddprun::examples {

TrainerCli::TrainerCli(const std::string& description,
                       const TrainerDefaults& defaults)
    : app_(description) {
  common_.output_dir = defaults.output_dir;
  common_.epochs = defaults.epochs;
  common_.synthetic_n = defaults.synthetic_n;
  AddCommonOptions(&app_, &common_);
}

void TrainerCli::AddDataOptions(const std::string& flag, std::string* path,
                                const std::string& help, double* val_fraction) {
  app_.add_option(flag, *path, help);
  app_.add_option("--val_fraction", *val_fraction,
                  "Fraction held out for validation (seeded split)")
      ->check(CLI::Range(0.01, 0.9));
}

void TrainerCli::AddNormOptions(std::string* norm, bool* sync_batchnorm) {
  app_.add_option("--norm", *norm,
                  "Normalisation layers: group (per sample) or batch")
      ->check(CLI::IsMember({"group", "batch"}));
  app_.add_flag("--sync_batchnorm", *sync_batchnorm,
                "With --norm batch: batch statistics over the global batch of "
                "all ranks (SyncBatchNorm)");
}

void TrainerCli::AddBatchSize(int64_t* batch_size, const std::string& help) {
  app_.add_option("--batch_size", *batch_size, help)
      ->check(CLI::PositiveNumber);
}

void TrainerCli::AddAccumulation(int64_t* steps) {
  app_.add_option("--gradient_accumulation_steps", *steps,
                  "Micro-batches per optimizer step")
      ->check(CLI::PositiveNumber);
}

std::optional<int> TrainerCli::Parse(int argc, char** argv) {
  // CLI11 shows no default for flags; say it so --help documents every
  // option's default.
  for (CLI::Option* option : app_.get_options()) {
    if (option->get_items_expected_max() == 0 && option != app_.get_help_ptr())
      option->description(option->get_description() + " (off by default)");
  }
  std::optional<int> stop = ParseFlags(&app_, argc, argv);
  MediaLimits limits;
  limits.max_image_pixels = common_.max_image_pixels;
  limits.max_volume_voxels = common_.max_volume_voxels;
  SetMediaLimits(limits);
  return stop;
}

bool TrainerCli::MakeSynthetic(const std::function<Status()>& write,
                               const std::string& noun,
                               const std::string& file) const {
  if (common_.make_synthetic.empty()) return false;
  OkOrThrow(write());
  std::printf("wrote %lld %s to %s/%s\n",
              static_cast<long long>(common_.synthetic_n), noun.c_str(),
              common_.make_synthetic.c_str(), file.c_str());
  return true;
}

void TrainerCli::Require(const std::string& flag, const std::string& value) {
  if (value.empty()) {
    throw worker::ConfigError(flag + " is required (or --make_synthetic DIR)");
  }
}

}  // namespace ddprun::examples
