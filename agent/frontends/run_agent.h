#pragma once

#include <functional>

#include "agent/cli/cli_parser.h"
#include "agent/process/env_map.h"

namespace ddprun::agent {

// What a front end (accelerate/, deepspeed/) hands its torchrun command line
// to: runs one node's agent for `CommandLine` with the environment `EnvMap`
// in this process and returns the exit code (main.cc binds it). The front
// ends depend on this and on cli/, never on the agent itself.
using RunAgentFn = std::function<int(CommandLine, EnvMap)>;

}  // namespace ddprun::agent
