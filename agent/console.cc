#include "agent/console.h"

#include <unistd.h>

#include <cerrno>

namespace ddprun::agent {

void WriteFully(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a closed console or a full disk must not stop the agent
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

void FdConsole::Write(Stream stream, std::string_view text) {
  WriteFully(stream == Stream::kOut ? STDOUT_FILENO : STDERR_FILENO, text);
}

}  // namespace ddprun::agent
