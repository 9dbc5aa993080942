#include "rendezvous/local_address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous/endpoint.h"

namespace ddprun::rendezvous {

namespace {

std::string SockaddrIp(const sockaddr_storage& ss) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), buf,
                  sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  return buf;
}

}  // namespace

std::string RouteSourceIp(const std::string& endpoint) {
  StatusOr<Endpoint> e = ParseEndpoint(endpoint);
  if (!e.ok()) return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(e->host.c_str(), std::to_string(e->port).c_str(), &hints,
                  &res) != 0) {
    return "";
  }
  std::string ip;
  for (addrinfo* ai = res; ai != nullptr && ip.empty(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      ip = SockaddrIp(local);
    }
    close(fd);
  }
  freeaddrinfo(res);
  return ip;
}

StatusOr<int> FreePort(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const char* node = addr.empty() ? nullptr : addr.c_str();
  if (getaddrinfo(node, "0", &hints, &res) != 0 || res == nullptr) {
    // An unresolvable --local_addr: any local port will do for the check.
    if (getaddrinfo(nullptr, "0", &hints, &res) != 0 || res == nullptr) {
      return UnavailableError("cannot resolve a local address to probe ports");
    }
  }
  int port = 0;
  for (addrinfo* ai = res; ai != nullptr && port == 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      port = ss.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (port == 0 && !addr.empty()) {
    // `addr` is not bindable here (e.g. a NAT address): probe any address.
    return FreePort("");
  }
  if (port == 0) return UnavailableError("no free TCP port for MASTER_PORT");
  return port;
}

}  // namespace ddprun::rendezvous
