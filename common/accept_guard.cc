#include "common/accept_guard.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>

#include "common/logging.h"
#include "common/mutex.h"

namespace ddprun {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Guard {
  std::atomic<bool> enabled{false};
  std::atomic<int> cap{0};
  Mutex mu;
  int limit GUARDED_BY(mu) = 0;
  // A spare descriptor, given up to accept on EMFILE.
  int reserve GUARDED_BY(mu) = -1;
  std::string what GUARDED_BY(mu);
  int64_t shed GUARDED_BY(mu) = 0;
  int64_t shed_unreported GUARDED_BY(mu) = 0;
  // Since the last accepted connection; read without mu on the fast path.
  std::atomic<bool> shedding{false};
  SteadyClock::time_point last_report GUARDED_BY(mu){};
};

Guard& TheGuard() {
  static Guard* guard = new Guard();  // never destroyed: accept4 may run late
  return *guard;
}

int RealAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, flags));
}

int SoftFdLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
      rl.rlim_cur > (1u << 30)) {
    return 1 << 30;
  }
  return static_cast<int>(rl.rlim_cur);
}

// One connection shed (under g.mu): counts it and says so at most every
// 10 s, so that a flood costs a log line, not a log line per connection.
void NoteShed(Guard& g, const char* why) REQUIRES(g.mu) {
  ++g.shed;
  ++g.shed_unreported;
  const bool new_episode = !g.shedding.exchange(true);
  const auto now = SteadyClock::now();
  if (!new_episode && now - g.last_report < std::chrono::seconds(10)) {
    return;
  }
  g.last_report = now;
  DDP_LOG(WARNING) << g.what << ": refused " << g.shed_unreported
                   << " connection(s): " << why << " (open file limit "
                   << g.limit << ", " << (g.limit - g.cap.load())
                   << " kept for the server itself); a connection that has "
                      "not finished its handshake (HTTP/2's, or a store "
                      "client's first query) within 10 s is closed; raise "
                      "the limit (ulimit -n) for more clients";
  g.shed_unreported = 0;
}

// Takes the pending connection of `fd` with the reserved descriptor and
// closes it (the table is full). Returns false when there was none.
bool ShedWithReserve(Guard& g, int fd) REQUIRES(g.mu) {
  if (g.reserve >= 0) {
    ::close(g.reserve);
    g.reserve = -1;
  }
  const int c = RealAccept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  const int saved = errno;
  if (c >= 0) ::close(c);
  g.reserve = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  errno = saved;
  return c >= 0;
}

}  // namespace

void EnableAcceptGuard(const char* what, int headroom) {
  Guard& g = TheGuard();
  MutexLock lock(&g.mu);
  g.limit = SoftFdLimit();
  if (headroom <= 0) headroom = std::max(32, g.limit / 8);
  g.cap = std::max(8, g.limit - headroom);
  g.what = what;
  if (g.reserve < 0) g.reserve = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  g.enabled = true;
}

AcceptGuardStats GetAcceptGuardStats() {
  Guard& g = TheGuard();
  MutexLock lock(&g.mu);
  return AcceptGuardStats{g.shed, g.limit, g.cap.load()};
}

int RaiseFdLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  return SoftFdLimit();
}

}  // namespace ddprun

// Replaces libc's accept4 for the whole process (the executable's definition
// takes precedence over libc's for gRPC's shared library too). Without the
// guard enabled it is exactly the system call.
extern "C" int accept4(int fd, sockaddr* __restrict addr,
                       socklen_t* __restrict len, int flags) {
  ddprun::Guard& g = ddprun::TheGuard();
  while (true) {
    const int c = ddprun::RealAccept4(fd, addr, len, flags);
    if (!g.enabled.load(std::memory_order_relaxed)) return c;
    if (c >= 0 && c < g.cap.load(std::memory_order_relaxed)) {
      if (g.shedding) {
        ddprun::MutexLock lock(&g.mu);
        if (g.shedding) {
          g.shedding = false;
          DDP_LOG(INFO) << g.what << ": accepting connections again (" << g.shed
                        << " refused so far)";
        }
      }
      return c;
    }
    if (c >= 0) {
      ::close(c);
      ddprun::MutexLock lock(&g.mu);
      ddprun::NoteShed(g, "too many open connections");
      continue;  // drain the backlog: the next one may fit again
    }
    if (errno != EMFILE && errno != ENFILE) return c;
    ddprun::MutexLock lock(&g.mu);
    if (!ddprun::ShedWithReserve(g, fd)) return c;  // nothing pending
    ddprun::NoteShed(g, "out of file descriptors");
  }
}
