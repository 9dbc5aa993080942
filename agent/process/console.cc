#include "agent/process/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include "common/file_util.h"

namespace ddprun::agent {

void FdConsole::Write(Stream stream, std::string_view text) {
  (void)WriteFully(stream == Stream::kOut ? STDOUT_FILENO : STDERR_FILENO,
                   text);
}

std::pair<unsigned short, unsigned short> FdConsole::TerminalSize() const {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
      return {ws.ws_row, ws.ws_col};
    }
  }
  return {0, 0};
}

bool FdConsole::IsTerminal(Stream stream) const {
  return ::isatty(stream == Stream::kOut ? STDOUT_FILENO : STDERR_FILENO) == 1;
}

void Console::WriteLive(Stream stream, const void* owner,
                        std::string_view text) {
  if (text.empty()) return;
  std::string out;
  if (open_owner_ != nullptr && open_owner_ != owner) out = "\n";
  out.append(text);
  open_owner_ = text.back() == '\n' ? nullptr : owner;
  Write(stream, out);
}

}  // namespace ddprun::agent
