#include "examples/frame/trainer_cli.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "ddprun/worker/errors.h"
#include "examples/formats/guide_flags.h"
#include "examples/formats/help_formatter.h"

namespace ddprun::examples {
namespace {

// Rank 0, or a process alone: the one that prints notes before the world
// exists.
bool IsMainProcess() {
  const char* rank = std::getenv("RANK");
  return rank == nullptr || *rank == '\0' || std::string(rank) == "0";
}

}  // namespace

TrainerCli::TrainerCli(const std::string& description,
                       const TrainerDefaults& defaults)
    : app_(description), parser_(&app_) {
  app_.formatter(std::make_shared<HelpFormatter>());
  common_.output_dir = defaults.output_dir;
  common_.epochs = defaults.epochs;
  common_.synthetic_n = defaults.synthetic_n;
  common_.gradient_accumulation_steps = defaults.gradient_accumulation_steps;
  AddCommonOptions();
  parser_.AddAliases(CommonGuideAliases());
  parser_.AddForeignFlags(CommonForeignFlags());
  parser_.AddOptionalValue({"amp", "bf16", "no"});
}

void TrainerCli::AddCommonOptions() {
  CommonOptions* o = &common_;
  parser_.AddConfigOption();
  app_.option_defaults()->always_capture_default();
  app_.add_option("--output_dir", o->output_dir,
                  "Directory for checkpoints/, metrics.jsonl and outputs");
  app_.add_option("--checkpoint_dir", o->checkpoint_dir,
                  "Directory of the checkpoints (default: "
                  "<output_dir>/checkpoints)");
  app_.add_option(
      "--make_synthetic", o->make_synthetic,
      "Write a synthetic dataset (real on-disk format) to DIR and exit");
  app_.add_option("--n", o->synthetic_n, "Samples written by --make_synthetic");
  app_.add_option("--epochs", o->epochs, "Training epochs")
      ->check(CLI::PositiveNumber);
  app_.add_option("--seed", o->seed,
                  "Random seed (model init, shuffling, synthetic data)");
  app_.add_option("--checkpoint_every", o->checkpoint_every,
                  "Rank 0 saves a checkpoint every N optimizer steps (0: only "
                  "at the end)")
      ->check(CLI::NonNegativeNumber);
  app_.add_option(
      "--resume_from", o->resume_from,
      "Checkpoint file to start from: any of ours, e.g. "
      "<checkpoint_dir>/best.pt (ignored when the checkpoint dir already has "
      "a run state)");
  app_.add_flag("--debug", o->debug,
                "Tiny subset and one epoch, for a quick check");
  app_.add_option(
      "--num_workers", o->num_workers,
      "Data-loader threads per rank (-1: auto from cores per local rank)");
  app_.add_option("--amp", o->amp,
                  "Mixed precision: bf16 autocast on the CPU, or on the GPU "
                  "under NCCL (off by default); --amp alone means bf16; fp16 "
                  "adds dynamic loss scaling (on a CPU without float16 "
                  "autocast: bf16, with a note)")
      ->check(CLI::IsMember({"bf16", "fp16", "no"}));
  app_.add_option("--mixed_precision", o->mixed_precision,
                  "The guides' spelling of --amp: no, bf16 or fp16")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}));
  app_.add_option("--gradient_accumulation_steps",
                  o->gradient_accumulation_steps,
                  "Micro-batches per optimizer step (DDP synchronises "
                  "gradients once per step)")
      ->check(CLI::PositiveNumber);
  app_.add_option("--local_rank", o->local_rank,
                  "Set by torch.distributed.launch / ddprun-launch without "
                  "--use_env (also --local-rank); must match LOCAL_RANK");
  app_.add_option("--backend", o->backend,
                  "Process group backend: auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app_.add_option("--progress_interval", o->progress_interval_s,
                  "Seconds between rank-0 progress lines");
  app_.add_flag("--profile", o->profile,
                "Rank 0 prints where each epoch's time went per step (data "
                "wait, forward, backward, gradient all-reduce wait, "
                "optimizer, metrics, checkpoint, validation) and adds it to "
                "metrics.jsonl as \"profile\"; synchronises a GPU around "
                "each phase");
  app_.add_option("--max_image_pixels", o->max_image_pixels,
                  "Largest image (width x height) a data file may declare; a "
                  "larger one is an error before it is decoded")
      ->check(CLI::PositiveNumber);
  app_.add_option("--max_volume_voxels", o->max_volume_voxels,
                  "Largest volume (voxels, all channels) a NIfTI file may "
                  "declare; a larger one is an error before it is read")
      ->check(CLI::PositiveNumber);
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

void TrainerCli::AddClipGrad(double* clip_grad) {
  app_.add_option("--clip_grad", *clip_grad,
                  "Clip the global gradient norm to this value (0: off)")
      ->check(CLI::NonNegativeNumber);
  parser_.AddAliases(
      {{"gradient_clip", "clip_grad", ""}, {"max_grad_norm", "clip_grad", ""}});
}

void TrainerCli::AddGradientCheckpointing(bool* gradient_checkpointing,
                                          const std::string& what) {
  app_.add_flag("--gradient_checkpointing", *gradient_checkpointing, what);
  parser_.AddAliases(
      {{"activation_checkpointing", "gradient_checkpointing", ""}});
}

void TrainerCli::AddAliases(const std::vector<FlagAlias>& aliases) {
  parser_.AddAliases(aliases);
}

void TrainerCli::AddForeignFlags(const std::vector<ForeignFlag>& flags) {
  parser_.AddForeignFlags(flags);
}

void TrainerCli::AddConfigFile(const ConfigFileOption& option) {
  parser_.AddConfigOption(option);
}

std::optional<int> TrainerCli::Parse(int argc, char** argv) {
  // CLI11 shows no default for flags; say it so --help documents every
  // option's default.
  for (CLI::Option* option : app_.get_options()) {
    if (option->get_items_expected_max() == 0 && option != app_.get_help_ptr())
      option->description(option->get_description() + " (off by default)");
  }
  app_.footer(parser_.DescribeAccepted());
  StatusOr<bool> go = parser_.Parse(argc, argv);
  if (!go.ok()) throw worker::ConfigError(go.status().message());
  if (!*go) {
    std::fputs(parser_.help_text().c_str(), stdout);
    return 0;
  }
  if (IsMainProcess()) {
    for (const std::string& note : parser_.notes())
      std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  CheckLocalRank();
  MediaLimits limits;
  limits.max_image_pixels = common_.max_image_pixels;
  limits.max_volume_voxels = common_.max_volume_voxels;
  SetMediaLimits(limits);
  return std::nullopt;
}

void TrainerCli::CheckLocalRank() const {
  if (!IsSet("local_rank")) return;
  const std::string flag = std::to_string(common_.local_rank);
  const char* env = std::getenv("LOCAL_RANK");
  if (env == nullptr || *env == '\0') {
    ::setenv("LOCAL_RANK", flag.c_str(), 1);
  } else if (std::atoi(env) != common_.local_rank) {
    throw worker::ConfigError("--local_rank " + flag +
                              " disagrees with LOCAL_RANK=" + env +
                              " from the launcher");
  }
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
