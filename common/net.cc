#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace ddprun {
namespace {

// getaddrinfo's list, freed on scope exit.
struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoList Resolve(const char* host, const std::string& service, int socktype,
                     int flags, int* error) {
  addrinfo hints{};
  hints.ai_socktype = socktype;
  hints.ai_flags = flags;
  addrinfo* res = nullptr;
  *error = getaddrinfo(host, service.c_str(), &hints, &res);
  if (*error != 0) return AddrInfoList(nullptr);
  return AddrInfoList(res);
}

// A socket closed on scope exit.
class Socket {
 public:
  Socket(int family, int type) : fd_(socket(family, type | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

int PortOf(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6
             ? ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port)
             : ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

// Binds port 0 on `addr` and returns the port the kernel chose, 0 if the
// bind failed (errno set).
int BindAnyPort(const sockaddr* addr, socklen_t len) {
  Socket s(addr->sa_family, SOCK_STREAM);
  if (s.fd() < 0) return 0;
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (bind(s.fd(), addr, len) != 0 ||
      getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &bound_len) !=
          0) {
    return 0;
  }
  return PortOf(bound);
}

}  // namespace

StatusOr<int> FreePort(const std::string& addr) {
  if (!addr.empty()) {
    int error = 0;
    AddrInfoList list =
        Resolve(addr.c_str(), "0", SOCK_STREAM, AI_PASSIVE, &error);
    for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      if (int port = BindAnyPort(ai->ai_addr, ai->ai_addrlen); port > 0) {
        return port;
      }
    }
    // Not bindable here (e.g. a NAT address): any local port will do.
  }
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  const int port = BindAnyPort(reinterpret_cast<sockaddr*>(&any), sizeof(any));
  if (port == 0) {
    return UnavailableError(std::string("cannot bind a free TCP port: ") +
                            std::strerror(errno));
  }
  return port;
}

StatusOr<bool> PortInUse(const std::string& host, int port) {
  int error = 0;
  AddrInfoList list = Resolve(host.c_str(), std::to_string(port), SOCK_STREAM,
                              AI_PASSIVE | AI_NUMERICSERV, &error);
  if (!list) {
    return InvalidArgumentError("cannot resolve '" + host +
                                "': " + gai_strerror(error));
  }
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(ai->ai_family, SOCK_STREAM);
    if (s.fd() < 0) continue;
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE) {
      return true;
    }
  }
  return false;
}

bool LoopbackPortAccepts(int port) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(static_cast<uint16_t>(port));
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(static_cast<uint16_t>(port));
  v6.sin6_addr = in6addr_loopback;
  const std::pair<const sockaddr*, socklen_t> targets[] = {
      {reinterpret_cast<const sockaddr*>(&v4), sizeof(v4)},
      {reinterpret_cast<const sockaddr*>(&v6), sizeof(v6)},
  };
  for (const auto& [addr, len] : targets) {
    Socket s(addr->sa_family, SOCK_STREAM);
    if (s.fd() >= 0 && connect(s.fd(), addr, len) == 0) return true;
  }
  return false;
}

bool ConnectRefused(const std::string& host, int port,
                    std::chrono::milliseconds timeout) {
  int error = 0;
  AddrInfoList list = Resolve(host.c_str(), std::to_string(port), SOCK_STREAM,
                              AI_NUMERICSERV, &error);
  if (!list) return false;
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(ai->ai_family, SOCK_STREAM);
    if (s.fd() < 0) return false;
    fcntl(s.fd(), F_SETFL, fcntl(s.fd(), F_GETFL) | O_NONBLOCK);
    int result = 0;
    if (connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        result = errno;
      } else {
        pollfd p{s.fd(), POLLOUT, 0};
        if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
        socklen_t len = sizeof(result);
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &result, &len);
      }
    }
    if (result != ECONNREFUSED) return false;
  }
  return true;
}

StatusOr<std::string> SourceAddressTowards(const std::string& host, int port) {
  int error = 0;
  AddrInfoList list =
      Resolve(host.c_str(), std::to_string(port), SOCK_DGRAM, 0, &error);
  if (!list) {
    return NotFoundError("cannot resolve '" + host +
                         "': " + gai_strerror(error));
  }
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(ai->ai_family, SOCK_DGRAM);
    if (s.fd() < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[NI_MAXHOST] = {0};
    if (connect(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(s.fd(), reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text,
                    sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0) {
      return std::string(text);
    }
  }
  return NotFoundError("no route from this host to '" + host + "'");
}

}  // namespace ddprun
