#pragma once

#include <string>

namespace ddprun::agent {

// "SIGKILL" for 9; "SIG<n>" for a number without a name.
std::string SignalName(int sig);

}  // namespace ddprun::agent
