#pragma once

#include <string>
#include <vector>

#include "agent/frontends/run_agent.h"

namespace ddprun::agent {

// `ddprun-deepspeed ARGS`: the `deepspeed` launcher on ddprun's agent.
// One node (no hostfile, a single host, --no_ssh, or the internal
// --world_info of a node launch): runs that node's workers here through
// `run_agent`. Several hosts: starts every node (a local one as a child
// process of this binary, the others with `ssh HOST ddprun-deepspeed
// --world_info=... --node_rank=I ...` in the same directory, with
// deepspeed's exported variables) and supervises them (node_fanout.h).
// Bad input is one `ddprun-deepspeed: error:` line and exit 2; an
// unreachable host or an address that cannot be found is one line and 1.
// Returns the exit code.
int RunDeepSpeed(const std::vector<std::string>& args, EnvMap env,
                 const RunAgentFn& run_agent);

// --help text.
std::string DeepSpeedHelpText();

}  // namespace ddprun::agent
