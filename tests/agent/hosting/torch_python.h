#pragma once

// The interpreter with Debian's torch 1.13 that the store tests run
// torch's own TCPStore with. Test code only.

#include <chrono>
#include <string>

#include "tests/support/process.h"

namespace ddprun::agent::store_test {

inline const std::string& TorchPython() {
  static const std::string* const kPython = new std::string("/usr/bin/python3");
  return *kPython;
}

// Whether TorchPython() imports torch.distributed (slow: torch loads).
inline bool HasTorchDistributed() {
  return testing::RunShell(
             TorchPython() + " -c 'import torch.distributed' 2>/dev/null",
             std::chrono::seconds(60))
             .exit_code == 0;
}

}  // namespace ddprun::agent::store_test
