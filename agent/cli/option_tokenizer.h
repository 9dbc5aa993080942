#pragma once

#include <map>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

// argparse-style splitting of a front end's command line (ddprun-accelerate,
// ddprun-deepspeed) into options and the entrypoint. The torchrun front end
// has its own table-driven parser (cli_parser.h) with PET_* defaults.
namespace ddprun::agent {

enum class OptionKind {
  kValue,  // --opt VALUE, --opt=VALUE, -o VALUE, -oVALUE, -o=VALUE
  kFlag,   // --opt (a value is an error)
  kHelp,   // -h/--help: stop and report help
};

struct OptionSpec {
  std::string dest;                // canonical name, e.g. "num_gpus"
  std::vector<std::string> names;  // "--num_gpus", "--num_accelerators", "-H"
  OptionKind kind = OptionKind::kValue;
};

struct TokenizedArgs {
  bool help = false;
  // dest -> value ("" for a flag); a repeated option keeps its last value.
  std::map<std::string, std::string> values;
  // dest -> the spelling used, for error messages ("--num-gpus").
  std::map<std::string, std::string> spelled;
  bool has_entrypoint = false;
  std::string entrypoint;
  std::vector<std::string> rest;  // everything after the entrypoint

  bool Has(const std::string& dest) const { return values.count(dest) != 0; }
  std::string Get(const std::string& dest, const std::string& def) const {
    auto it = values.find(dest);
    return it == values.end() ? def : it->second;
  }
  // The spelling used, else "--dest".
  std::string Name(const std::string& dest) const {
    auto it = spelled.find(dest);
    return it == spelled.end() ? "--" + dest : it->second;
  }
};

// Splits `args` as argparse would: options in any order up to the first
// argument that is not an option (or the one after "--"): that is the
// entrypoint, and everything after it is passed on untouched. Long names
// may be written with '-' or '_' after the leading "--"; with
// `allow_abbrev`, an unambiguous prefix of a long name is accepted.
// "-1", "-0.5" and words with a space ("-F cfg") are values, not options.
// Errors (kInvalidArgument, one line): unknown or ambiguous option, a flag
// given a value, an option missing its value.
StatusOr<TokenizedArgs> TokenizeOptions(const std::vector<std::string>& args,
                                        const std::vector<OptionSpec>& specs,
                                        bool allow_abbrev);

// Typed values of a TokenizedArgs entry; errors name the option.
StatusOr<long> OptionInt(const TokenizedArgs& t, const std::string& dest,
                         long def);
StatusOr<double> OptionDouble(const TokenizedArgs& t, const std::string& dest,
                              double def);
// One of `choices` (or `def` when absent).
StatusOr<std::string> OptionChoice(const TokenizedArgs& t,
                                   const std::string& dest,
                                   const std::vector<std::string>& choices,
                                   const std::string& def);

}  // namespace ddprun::agent
