#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "examples/common/trainer_support.h"

namespace ddprun::examples {

// Per-trainer defaults of the common options (what --help shows).
struct TrainerDefaults {
  std::string output_dir;
  int epochs = 1;
  int64_t synthetic_n = 0;  // --n of --make_synthetic
};

// The command line every trainer starts from: a CLI11 app with the common
// options (AddCommonOptions) and helpers for the options and steps that
// several trainers share, so each is registered (name, check, default shown
// in --help) in one place. Flags override --config values (CLI11 applies
// config values only to options absent from the command line).
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

  // --gradient_accumulation_steps (positive).
  void AddAccumulation(int64_t* steps);

  // Parses argv (call once: it appends "(off by default)" to flags' help).
  // Returns the exit code when the program should stop
  // (--help: 0; a bad flag or config file: CLI11's code after printing the
  // error), nullopt to continue.
  std::optional<int> Parse(int argc, char** argv);

  // With --make_synthetic DIR: runs `write` (throws ConfigError on its
  // error), prints "wrote <n> <noun> to DIR/<file>" and returns true.
  // Returns false (and does nothing) without it.
  bool MakeSynthetic(const std::function<Status()>& write,
                     const std::string& noun, const std::string& file) const;

  // Throws ConfigError "<flag> is required (or --make_synthetic DIR)" when
  // `value` is empty.
  static void Require(const std::string& flag, const std::string& value);

 private:
  CLI::App app_;
  CommonOptions common_;
};

}  // namespace ddprun::examples
