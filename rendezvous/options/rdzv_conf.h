#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

// The --rdzv_conf keys ddprun knows, in one table. The command-line parser
// validates every --rdzv_conf against it (any backend, so bad input is one
// line and exit 2 before anything starts); the consumers (ApplyRdzvConf, the
// rendezvous factory, the agent's join timeout) read typed values through
// the getters below. No network or process dependencies; pure functions
// apart from ValidateRdzvConf's check that file keys name readable files.
namespace ddprun::rendezvous {

using RdzvConf = std::map<std::string, std::string>;

enum class RdzvConfKind {
  kSeconds,  // a number of seconds in [0.001, 1e6], fractions allowed
  kCount,    // an integer in 0..1000
  kBool,     // 1/true/t/yes/y/on or 0/false/f/no/n/off (any case)
  kText,     // any non-empty text
  kFile,     // the path of a readable file
  kPort,     // a TCP port in 1..65535
};

struct RdzvConfKey {
  const char* name;
  RdzvConfKind kind;
  // A torchrun key ddprun accepts (and checks) but does not act on.
  bool no_effect;
};

// Every known key, in the order error messages list them.
const std::vector<RdzvConfKey>& RdzvConfKeys();

// Checks every entry of `conf`: the key is known and its value has the key's
// kind. `source` names where the text came from ("--rdzv_conf" or
// "PET_RDZV_CONF"). Errors: kInvalidArgument with one line naming the source,
// the key and the value; an unknown key's line lists the known keys. Appends
// one line to *warnings (when not null) per key that has no effect in ddprun.
Status ValidateRdzvConf(const std::string& source, const RdzvConf& conf,
                        std::vector<std::string>* warnings);

// Typed values of the known keys (call the getter of the key's kind):
// nullopt when `key` is absent, else the value, or kInvalidArgument
// ("rdzv_conf KEY=VALUE: expected ...") when it does not parse as that kind.
StatusOr<std::optional<std::chrono::milliseconds>> RdzvConfSeconds(
    const RdzvConf& conf, const std::string& key);
StatusOr<std::optional<long>> RdzvConfCount(const RdzvConf& conf,
                                            const std::string& key);
StatusOr<std::optional<bool>> RdzvConfBool(const RdzvConf& conf,
                                           const std::string& key);
StatusOr<std::optional<int>> RdzvConfPort(const RdzvConf& conf,
                                          const std::string& key);

}  // namespace ddprun::rendezvous
