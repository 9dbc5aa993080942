#pragma once

#include <map>
#include <string>

namespace ddprun::agent {

// A process environment, name -> value: what ddprun inherited, what a front
// end adds, what a worker gets (elastic/worker_env.h). Ordered so that logs
// and tests see the same order every run.
using EnvMap = std::map<std::string, std::string>;

}  // namespace ddprun::agent
