#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ddprun/common/status_or.h"
#include "examples/formats/yaml_config.h"

namespace ddprun::examples {

// A name the guides' scripts use for one of our options. Names carry no
// dashes ("lr"); a dotted alias ("deepspeed.stage") matches only that config
// key, and before any foreign section it lies in (so "deepspeed.stage" can
// set --zero while the rest of "deepspeed:" is noted). With `value` set the
// alias is a switch: "--fp16" (or "fp16: true" in a config file) gives
// `target` that value; "fp16: false" does nothing (and sets nothing).
struct FlagAlias {
  std::string alias;
  std::string target;  // our option, e.g. "learning_rate"
  std::string value;   // empty: the alias takes the option's own value
};

// A flag of the guides' scripts that means nothing here (DataParallel,
// Weights & Biases, DeepSpeed, ...): accepted on the command line and as a
// config key (also as a section: "deepspeed:" and every key under it), and
// answered with one line saying what we do instead. A dotted name
// ("deepspeed.enabled") matches that config key only, before its section.
// An option the trainer registers itself beats a foreign flag of the same
// name.
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

// A config-file option: "--config FILE" (every trainer) or another one a
// trainer adds ("--deepspeed_config FILE": DeepSpeed's JSON). Files apply in
// the order their options were added.
struct ConfigFileOption {
  std::string name = "config";  // the flag, without dashes
  std::string help;
  // A key that names no option, alias or foreign flag: an error (our own
  // files, where it is most likely a typo), or, for a file in another
  // tool's format, one note line for all of them:
  // "<file>: <unknown_note>: key1, key2".
  bool note_unknown_keys = false;
  std::string unknown_note;
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
//     option is an error naming the file, the line and the key. Two files
//     setting one option must agree (same value), else it is an error
//     naming both.
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
  // Registers another config-file option (see ConfigFileOption).
  void AddConfigOption(const ConfigFileOption& option);

  // Returns false when --help was requested (the help text is in
  // help_text()), true to go on, or the error.
  StatusOr<bool> Parse(int argc, const char* const* argv);
  StatusOr<bool> Parse(const std::vector<std::string>& args);  // no argv[0]

  const std::string& help_text() const { return help_; }
  // One line per foreign flag or key met ("--use_wandb: ..."), in order.
  const std::vector<std::string>& notes() const { return notes_; }
  // True when the command line or the config file gave `name` (no dashes).
  bool IsSet(const std::string& name) const;
  // The value a foreign flag was given with ("" for a bare switch) when the
  // command line or a config file had it (the first time), else nullopt.
  // `name` is the ForeignFlag's name; a config section ("deepspeed:")
  // counts as its name with the value of its first key.
  std::optional<std::string> ForeignValue(const std::string& name) const;

  // "<file>:<line>: <key>" of the config entry that gave option `name` its
  // value, or "" when none did (no such key, or the command line won).
  std::string ConfigSource(const std::string& name) const;

  // Also-accepted names for --help's footer.
  std::string DescribeAccepted() const;

 private:
  StatusOr<std::vector<std::string>> Rewrite(
      const std::vector<std::string>& args);
  Status CheckRemaining() const;
  Status ApplyConfig(const std::string& path, const ConfigFileOption& option);
  // Sets *unknown when the key names nothing (and the file notes those).
  Status ApplyEntry(const std::string& path, const ConfigFileOption& option,
                    const ConfigEntry& entry, bool* unknown);
  void Note(const std::string& name, const std::string& line);
  void Seen(const std::string& name, const std::string& value);
  std::string Closest(const std::string& name) const;
  const ForeignFlag* FindForeign(const std::string& key) const;
  const FlagAlias* FindAlias(const std::string& key) const;
  const FlagAlias* FindExactAlias(const std::string& key) const;
  const OptionalValue* FindOptional(const std::string& name) const;

  CLI::App* app_;
  std::vector<ConfigFileOption> config_options_;
  std::deque<std::string> config_paths_;  // CLI11 writes them (stable refs)
  std::vector<FlagAlias> aliases_;
  std::vector<ForeignFlag> foreign_;
  std::vector<OptionalValue> optional_;
  std::map<std::string, ConfigSectionHandler> sections_;
  std::vector<std::string> notes_;
  std::set<std::string> noted_;
  std::map<std::string, std::string> foreign_seen_;  // name -> first value
  // Option name -> the config entry that set it.
  struct ConfigSetting {
    std::string path;   // the file
    std::string where;  // "'key' at line N"
    std::vector<std::string> values;
  };
  std::map<std::string, ConfigSetting> from_config_;
  // Option name -> "<file>:<line>: <key>" of the entry applied to it.
  std::map<std::string, std::string> applied_;
  std::string help_;
};

}  // namespace ddprun::examples
