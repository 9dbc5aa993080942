#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status_or.h"
#include "examples/common/yaml_config.h"

namespace ddprun::examples {

// A name the guides' scripts use for one of our options. Names carry no
// dashes ("lr"); a dotted alias ("deepspeed.stage") matches only that config
// key. With `value` set the alias is a switch: "--fp16" (or "fp16: true" in
// a config file) gives `target` that value; "fp16: false" does nothing.
struct FlagAlias {
  std::string alias;
  std::string target;  // our option, e.g. "learning_rate"
  std::string value;   // empty: the alias takes the option's own value
};

// A flag of the guides' scripts that means nothing here (DataParallel,
// Weights & Biases, DeepSpeed, ...): accepted on the command line and as a
// config key (also as a section: "deepspeed:" and every key under it), and
// answered with one line saying what we do instead.
struct ForeignFlag {
  enum class Arity { kNone, kOne, kOptional };  // how many values it takes
  std::string name;
  Arity arity = Arity::kNone;
  std::string explanation;
};

// The candidate closest to `name` by edit distance (at most 2 edits, 1 for
// names under 5 characters), or "" when none is that close: the "did you
// mean" of every unknown-name error.
std::string ClosestName(const std::string& name,
                        const std::vector<std::string>& candidates);

// Takes the entries of one config section that are not options (a guide's
// list of per-stage mappings): `at` is "<file>:<line>: " for its errors.
using ConfigSectionHandler =
    std::function<Status(const std::string& at, const ConfigEntry& entry)>;

// An option whose value may be left out on the command line: "--amp" alone
// means --amp=<implicit>; a config value true/false means implicit/off.
struct OptionalValue {
  std::string name;
  std::string implicit;
  std::string off;
};

// The trainers' command line on top of a CLI11 app whose options are
// already registered. Parse():
//  1. rewrites argv: "--a-b" is "--a_b" (torchrun's and Python's two
//     spellings), aliases become our names, foreign flags are taken out
//     (with their values) and noted, "--amp" alone gets its implicit value;
//  2. parses with CLI11; an unknown option is an error naming it with the
//     closest known name ("unknown option --lrr (did you mean --lr?)");
//  3. applies --config FILE: each key (nested sections as dotted keys,
//     resolved by full key, then by its last part) sets the option it names
//     unless the command line already did (a flag beats the file). An
//     unknown key, a key without value, a bad value or two keys setting one
//     option is an error naming the file, the line and the key.
// Priority: command line > config file > whatever the trainer applies
// afterwards to options that are !IsSet() (e.g. --auto_optimize) > default.
// Errors come back as INVALID_ARGUMENT (one line; the trainers throw it as
// a ConfigError, exit code 2). Not thread-safe; call Parse() once.
class FlagParser {
 public:
  explicit FlagParser(CLI::App* app);

  // Entries replace earlier ones of the same name.
  void AddAliases(const std::vector<FlagAlias>& aliases);
  void AddForeignFlags(const std::vector<ForeignFlag>& flags);
  void AddOptionalValue(const OptionalValue& option);
  // Config keys `section`, "section.*" and "section[i].*" go to `handler`
  // (in file order) instead of setting options.
  void AddConfigSection(const std::string& section,
                        ConfigSectionHandler handler);

  // Registers "--config FILE" on the app (shown by --help).
  void AddConfigOption();

  // Returns false when --help was requested (the help text is in
  // help_text()), true to go on, or the error.
  StatusOr<bool> Parse(int argc, const char* const* argv);
  StatusOr<bool> Parse(const std::vector<std::string>& args);  // no argv[0]

  const std::string& help_text() const { return help_; }
  // One line per foreign flag or key met ("--use_wandb: ..."), in order.
  const std::vector<std::string>& notes() const { return notes_; }
  // True when the command line or the config file gave `name` (no dashes).
  bool IsSet(const std::string& name) const;

  // Also-accepted names for --help's footer.
  std::string DescribeAccepted() const;

 private:
  StatusOr<std::vector<std::string>> Rewrite(
      const std::vector<std::string>& args);
  Status CheckRemaining() const;
  Status ApplyConfig(const std::string& path);
  Status ApplyEntry(const std::string& path, const ConfigEntry& entry);
  void Note(const std::string& name, const std::string& line);
  std::string Closest(const std::string& name) const;
  const ForeignFlag* FindForeign(const std::string& key) const;
  const FlagAlias* FindAlias(const std::string& key) const;
  const OptionalValue* FindOptional(const std::string& name) const;

  CLI::App* app_;
  std::string config_path_;
  std::vector<FlagAlias> aliases_;
  std::vector<ForeignFlag> foreign_;
  std::vector<OptionalValue> optional_;
  std::map<std::string, ConfigSectionHandler> sections_;
  std::vector<std::string> notes_;
  std::set<std::string> noted_;
  // Option name -> "key at line N" of the config entry that set it.
  std::map<std::string, std::string> from_config_;
  std::string help_;
};

}  // namespace ddprun::examples
