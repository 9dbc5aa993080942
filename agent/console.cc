#include "agent/console.h"

#include <unistd.h>

#include "common/file_util.h"

namespace ddprun::agent {

void FdConsole::Write(Stream stream, std::string_view text) {
  (void)WriteFully(stream == Stream::kOut ? STDOUT_FILENO : STDERR_FILENO,
                   text);
}

}  // namespace ddprun::agent
