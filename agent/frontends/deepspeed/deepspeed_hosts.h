#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ddprun/common/status_or.h"

// The `deepspeed` launcher's resource model (deepspeed/launcher/runner.py):
// a hostfile lists hosts and their slots (devices); --include/--exclude and
// --num_nodes/--num_gpus pick the slots used; the result, in hostfile order,
// is the "world info" every node's launch reads (node rank = position).
// Pure functions; errors are kInvalidArgument with one line.
namespace ddprun::agent {

// Hosts in hostfile order with their slot counts.
using ResourcePool = std::vector<std::pair<std::string, int>>;
// Hosts in hostfile order with the device ids (slots) used on each.
using ActiveResources = std::vector<std::pair<std::string, std::vector<int>>>;

// Parses an MPI-style hostfile: `host slots=N` per line, `#` comments and
// blank lines ignored (runner.py's _parse_hostfile: anything after
// `slots=N` is ignored too). Errors name `source` and the line: a bad line,
// a host listed twice, a host starting with '-' (ssh would read it as an
// option: -oProxyCommand=... runs a command), no host at all.
StatusOr<ResourcePool> ParseHostfile(const std::string& source,
                                     const std::string& text);

// runner.py's parse_resource_filter over the hostfile's slots, as
// deepspeed's own tests (tests/unit/launcher/test_run.py) call it:
// `include` / `exclude` are NODE_SPEC[@NODE_SPEC...] with NODE_SPEC =
// NAME[:SLOT[,SLOT...]]; at most one of them non-empty. Include keeps only
// the named hosts (all their slots, or exactly the listed ones); exclude
// removes hosts or slots. Hosts left without slots are dropped; order stays
// the hostfile's. Errors: both given, an unknown host, a listed slot the
// host does not have (in --include too: deepspeed 0.19's main() skips that
// check, its tests expect it), a slot that is not an integer.
StatusOr<ActiveResources> FilterResources(const ResourcePool& pool,
                                          const std::string& include,
                                          const std::string& exclude);
// The same with each host's slot ids given (e.g. this host's GPUs that
// CUDA_VISIBLE_DEVICES lets through).
StatusOr<ActiveResources> FilterResources(const ActiveResources& host_info,
                                          const std::string& include,
                                          const std::string& exclude);

// The world info as deepspeed passes it to each node's launch
// (--world_info=): URL-safe base64 of the JSON object {"host": [slots]}
// written as Python's json.dumps writes it, so both launchers print the
// same string.
std::string EncodeWorldInfo(const ActiveResources& resources);
// The inverse. Errors: not base64, not such a JSON object.
StatusOr<ActiveResources> DecodeWorldInfo(const std::string& encoded);

}  // namespace ddprun::agent
