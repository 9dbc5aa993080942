#include "worker/src/standby.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/file_util.h"

namespace ddprun::worker {
namespace {

// More than any environment the agent sends (ARG_MAX is 2 MiB).
constexpr size_t kMaxMessage = 16u << 20;

}  // namespace

StatusOr<EnvList> ParseStandbyEnv(std::string_view message) {
  const size_t end = message.find(std::string_view("\0\0", 2));
  if (!message.empty() && message[0] == '\0') {
    return InvalidArgumentError("standby message: no variable at all");
  }
  if (end == std::string_view::npos) {
    return InvalidArgumentError("standby message: not ended by an empty entry");
  }
  if (end + 2 != message.size()) {
    return InvalidArgumentError("standby message: bytes after its end");
  }
  EnvList env;
  std::set<std::string> names;
  size_t pos = 0;
  while (pos <= end) {
    const size_t stop = message.find('\0', pos);
    const std::string_view entry = message.substr(pos, stop - pos);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return InvalidArgumentError("standby message: bad entry '" +
                                  std::string(entry.substr(0, 64)) + "'");
    }
    std::string name(entry.substr(0, eq));
    if (!names.insert(name).second) {
      return InvalidArgumentError("standby message: " + name + " given twice");
    }
    env.emplace_back(std::move(name), std::string(entry.substr(eq + 1)));
    pos = stop + 1;
  }
  return env;
}

StatusOr<EnvList> ReceiveStandbyEnv(int fd) {
  // MSG_NOSIGNAL: an agent that is gone is an error, not SIGPIPE.
  static const char kReady[] = "ready\n";
  if (::send(fd, kReady, sizeof(kReady) - 1, MSG_NOSIGNAL) < 0) {
    return ErrnoStatus("telling the agent the standby is ready", errno);
  }
  std::string message;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("reading the standby channel", errno);
    }
    if (n == 0) {
      return UnavailableError("the agent closed the standby channel");
    }
    message.append(buf, static_cast<size_t>(n));
    if (message.size() > kMaxMessage) {
      return ResourceExhaustedError("standby message over 16 MiB");
    }
    // A message ends with "\0\0": an entry is never empty.
    if (message.size() >= 2 && message.back() == '\0' &&
        message[message.size() - 2] == '\0') {
      return ParseStandbyEnv(message);
    }
  }
}

Status ReplaceEnvironment(const EnvList& env) {
  if (::clearenv() != 0) return InternalError("clearenv failed");
  for (const auto& [name, value] : env) {
    if (::setenv(name.c_str(), value.c_str(), 1) != 0) {
      return ErrnoStatus("setenv " + name, errno);
    }
  }
  return Status::Ok();
}

void BecomeRankIfStandby() {
  const char* text = std::getenv("DDPRUN_STANDBY_FD");
  if (text == nullptr) return;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  Status status = Status::Ok();
  if (*text == '\0' || *end != '\0' || fd < 0 || fd > 65535) {
    status = InvalidArgumentError(std::string("DDPRUN_STANDBY_FD=") + text +
                                  " is not a file descriptor");
  } else {
    StatusOr<EnvList> env = ReceiveStandbyEnv(static_cast<int>(fd));
    status = env.ok() ? ReplaceEnvironment(*env) : env.status();
    ::close(static_cast<int>(fd));
  }
  if (status.ok()) return;
  const bool closed = status.code() == StatusCode::kUnavailable;
  (void)WriteFully(
      2, "[standby] " + status.message() + (closed ? ": exiting\n" : "\n"));
  std::_Exit(closed ? 0 : 2);
}

}  // namespace ddprun::worker
