#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/cli/launch_options.h"
#include "ddprun/common/status_or.h"

// Parsers for the values of individual torchrun flags. Each takes the text as
// given and the name of where it came from ("--nnodes" or "PET_NNODES"), and
// returns kInvalidArgument with one line naming that source and the bad value.
// Pure functions; thread-safe.
namespace ddprun::agent {

// Whole-string integer / finite double ("3", "-1", "0.5"); no spaces.
StatusOr<long> ParseIntValue(const std::string& source,
                             const std::string& text);
StatusOr<double> ParseDoubleValue(const std::string& source,
                                  const std::string& text);

// PET_* boolean: an integer (non-zero = on, as torchrun's bool(int(x))) or
// true/false/yes/no/on/off.
StatusOr<bool> ParseBoolValue(const std::string& source,
                              const std::string& text);

struct NodeRange {
  int min_nodes = 1;
  int max_nodes = 1;
};
// "N" or "MIN:MAX" with 0 < MIN <= MAX.
StatusOr<NodeRange> ParseNnodes(const std::string& source,
                                const std::string& text);

// -r/-t: "0".."3" for every rank, or "0:1,1:2" per local rank.
StatusOr<StdSpec> ParseStdSpec(const std::string& source,
                               const std::string& text);

// "k=v,k=v" (empty = no entries). Keys and values must be non-empty. A
// value wrapped in one matching pair of quotes ('...' or "...") is read as
// what is between them.
StatusOr<std::map<std::string, std::string>> ParseRdzvConf(
    const std::string& source, const std::string& text);

// A port number. 1..65535, or 0..65535 when allow_zero.
StatusOr<int> ParsePort(const std::string& source, const std::string& text,
                        bool allow_zero);

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = -1;     // -1 = not given
};
// "host", "host:port", "[v6]", "[v6]:port". A bare IPv6 address (several
// colons, no brackets) is an error because its port would be ambiguous.
// Port 0 is allowed (bind a free port).
StatusOr<HostPort> ParseHostPort(const std::string& source,
                                 const std::string& text);

// "SIGTERM,SIGUSR1" -> signal numbers, in order, without duplicates.
// Unknown names and uncatchable signals (SIGKILL, SIGSTOP) are errors.
StatusOr<std::vector<int>> ParseSignalList(const std::string& source,
                                           const std::string& text);

// "0,1,3" -> {0,1,3}; every entry an int >= 0; at least one entry.
StatusOr<std::set<int>> ParseRankSet(const std::string& source,
                                     const std::string& text);

// --duplicate_std*_filters: comma-separated substrings, ",," escaping a
// comma. Empty substrings (e.g. "a,,,b" is fine, "a,,b," is not) are errors.
StatusOr<std::vector<std::string>> ParseFilterList(const std::string& source,
                                                   const std::string& text);

// A random RFC 4122 version-4 UUID ("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"),
// as torchrun's str(uuid.uuid4()) for --standalone run ids.
std::string RandomUuid4();

}  // namespace ddprun::agent
