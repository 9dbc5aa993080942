#include "agent/process/signal_names.h"

#include <string.h>

namespace ddprun::agent {

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return "SIG" + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

}  // namespace ddprun::agent
