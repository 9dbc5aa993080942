#pragma once

#include <string_view>

namespace ddprun::agent {

// Where the agent writes worker lines and its own reports; injected so tests
// capture output. Each Write is atomic with respect to other Writes.
class Console {
 public:
  enum class Stream { kOut, kErr };
  virtual ~Console() = default;
  virtual void Write(Stream stream, std::string_view text) = 0;
};

// Writes to the agent's fd 1 / fd 2 with whole-buffer write(2) loops
// (common/file_util.h WriteFully); gives up silently on errors (a closed
// console must not stop the agent).
class FdConsole : public Console {
 public:
  void Write(Stream stream, std::string_view text) override;
};

}  // namespace ddprun::agent
