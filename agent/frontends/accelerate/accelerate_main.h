#pragma once

#include <string>
#include <vector>

#include "agent/frontends/run_agent.h"

namespace ddprun::agent {

// `ddprun-accelerate ARGS`: `accelerate launch` on ddprun (see
// accelerate_cli.h). The multi-GPU path runs the agent through `run_agent`
// with accelerate's variables in the inherited environment; the
// single-process path replaces this process with the script (execve).
// Bad input is one `ddprun-accelerate: error:` line and exit 2; a taken
// main process port on machine 0 of several, one line and exit 1.
int RunAccelerate(const std::vector<std::string>& args, EnvMap env,
                  const RunAgentFn& run_agent);

}  // namespace ddprun::agent
