#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ddprun/common/status.h"
#include "examples/formats/flag_parser.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {

// Per-trainer defaults of the common options (what --help shows).
struct TrainerDefaults {
  std::string output_dir;
  int epochs = 1;
  int64_t synthetic_n = 0;  // --n of --make_synthetic
  int64_t gradient_accumulation_steps = 1;
};

// The command line every trainer starts from: a CLI11 app with the common
// options (output and checkpoint dirs, epochs, seed, checkpoints, resume,
// --debug, loader threads, --amp / --mixed_precision, accumulation,
// --local_rank, backend, --config) and helpers for the options several
// trainers share, so each is registered (name, check, default shown in
// --help) in one place. Parsing goes through FlagParser (flag_parser.h):
// --a-b spellings, the guides' aliases (CommonGuideAliases() plus the
// trainer's AddAliases), the guides' flags that mean nothing here
// (CommonForeignFlags() plus AddForeignFlags: one line each on rank 0),
// nested config sections. Priority: flag > config file > what the trainer
// applies to !IsSet() options (--auto_optimize) > default.
class TrainerCli {
 public:
  TrainerCli(const std::string& description, const TrainerDefaults& defaults);

  CLI::App& app() { return app_; }
  CommonOptions& common() { return common_; }

  // The data file flag (`flag`, e.g. "--csv_path") and --val_fraction
  // (a seeded split, 0.01..0.9).
  void AddDataOptions(const std::string& flag, std::string* path,
                      const std::string& help, double* val_fraction);

  // --norm group|batch and --sync_batchnorm (see ParseNormKind).
  void AddNormOptions(std::string* norm, bool* sync_batchnorm);

  // --batch_size (positive) with `help` saying per rank or total.
  void AddBatchSize(int64_t* batch_size, const std::string& help);

  // --clip_grad N (>= 0; 0: off): clip the global gradient norm to N before
  // each optimizer step. The guides' --gradient_clip and --max_grad_norm
  // (and those config keys) are aliases. Its default is *clip_grad's value.
  void AddClipGrad(double* clip_grad);

  // --gradient_checkpointing: activation checkpointing, `what` saying what
  // backward recomputes (--help); the guides' --activation_checkpointing is
  // an alias.
  void AddGradientCheckpointing(bool* gradient_checkpointing,
                                const std::string& what);

  // The trainer's own guide names (after the common ones; same name
  // replaces).
  void AddAliases(const std::vector<FlagAlias>& aliases);
  void AddForeignFlags(const std::vector<ForeignFlag>& flags);
  // Another config file beside --config (vqa: --deepspeed_config FILE, a
  // DeepSpeed JSON read through the trainer's dotted aliases).
  void AddConfigFile(const ConfigFileOption& option);
  // A config section the trainer reads itself (FlagParser::AddConfigSection).
  void AddConfigSection(const std::string& section,
                        ConfigSectionHandler handler) {
    parser_.AddConfigSection(section, std::move(handler));
  }

  // Parses argv (call once). Returns 0 after printing --help, nullopt to
  // continue. Throws worker::ConfigError (exit code 2) for an unknown or bad
  // flag, a bad config file, or a --local_rank that disagrees with
  // LOCAL_RANK; without LOCAL_RANK in the environment --local_rank sets it
  // (the legacy torch.distributed.launch passes only the flag).
  std::optional<int> Parse(int argc, char** argv);

  // True when the command line or the config file gave option `name`
  // (without dashes).
  bool IsSet(const std::string& name) const { return parser_.IsSet(name); }
  // The value a foreign flag (or config section) was given with, nullopt
  // when it was not (FlagParser::ForeignValue): lets a trainer act on a
  // guide's switch that it also explains, e.g. vqa on --use_deepspeed.
  std::optional<std::string> ForeignValue(const std::string& name) const {
    return parser_.ForeignValue(name);
  }
  // "<file>:<line>: <key>" when the config file (not the command line) gave
  // option `name`, else "".
  std::string ConfigSource(const std::string& name) const {
    return parser_.ConfigSource(name);
  }

  // With --make_synthetic DIR: runs `write` (throws ConfigError on its
  // error), prints "wrote <n> <noun> to DIR/<file>" and returns true.
  // Returns false (and does nothing) without it.
  bool MakeSynthetic(const std::function<Status()>& write,
                     const std::string& noun, const std::string& file) const;

  // Throws ConfigError "<flag> is required (or --make_synthetic DIR)" when
  // `value` is empty.
  static void Require(const std::string& flag, const std::string& value);

 private:
  void AddCommonOptions();
  void CheckLocalRank() const;

  CLI::App app_;
  CommonOptions common_;
  FlagParser parser_;
};

}  // namespace ddprun::examples
