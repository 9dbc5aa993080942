#pragma once

// Loopback sockets that are not stores, for the store client's tests: a
// port that refuses connections, and one that accepts them (the kernel
// completes the handshake from its backlog) but never answers. Test code
// only.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddprun_catch.h"

namespace ddprun::agent::store_test {

// A socket bound to 127.0.0.1 on a port of its own; with `listen` false
// the port refuses connections (a reset), and no other process can take
// it while this lives.
class LoopbackSocket {
 public:
  explicit LoopbackSocket(bool listen) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    if (listen) REQUIRE(::listen(fd_, 16) == 0);
  }
  ~LoopbackSocket() { close(fd_); }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  int port() const { return port_; }
  // The next connection from the backlog (a listening socket's); -1 when
  // none is there.
  int Accept() { return accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ddprun::agent::store_test
