#include "agent/process/signal_watcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace ddprun::agent {

SignalWatcher::~SignalWatcher() { Stop(); }

Status SignalWatcher::Start(const std::vector<int>& signals, Handler handler) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) {
    if (sigaddset(&set, sig) != 0) {
      return InvalidArgumentError("cannot handle signal " +
                                  std::to_string(sig) + ": " +
                                  std::strerror(errno));
    }
  }
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
    return InternalError("pthread_sigmask failed");
  }
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0) {
    return InternalError(std::string("signalfd/eventfd: ") +
                         std::strerror(errno));
  }
  handler_ = std::move(handler);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void SignalWatcher::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  signal_fd_ = stop_fd_ = -1;
}

void SignalWatcher::Loop() {
  while (true) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    signalfd_siginfo info;
    if (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      handler_(static_cast<int>(info.ssi_signo));
    }
  }
}

}  // namespace ddprun::agent
