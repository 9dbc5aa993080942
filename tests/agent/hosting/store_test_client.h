#pragma once

// A TCPStore client written from torch's wire format, for the agent store's
// tests (agent/hosting/agent_store.h): queries of both dialects over a real
// socket to 127.0.0.1, replies read with a deadline. Test code only.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "agent/hosting/agent_store.h"
#include "ddprun_catch.h"
#include "tests/agent/hosting/store_query.h"

namespace ddprun::agent::store_test {

using namespace std::chrono_literals;

class Client : public StoreQueryBuilder<Client> {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~Client() { close(fd_); }
  int fd() const { return fd_; }

  void Send() {
    REQUIRE(send(fd_, buf_.data(), buf_.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(buf_.size()));
    buf_.clear();
  }
  void Validate() { ValidateQuery().Send(); }
  // Sends what was built so far, every byte (blocking); false when the
  // connection fails. No REQUIRE: usable from a thread of the test.
  bool SendAll() {
    size_t at = 0;
    while (at < buf_.size()) {
      const ssize_t n =
          send(fd_, buf_.data() + at, buf_.size() - at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    buf_.clear();
    return true;
  }

  // Exactly n bytes, or "" when the connection closes or 5 s pass.
  std::string Read(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return "";
      char b[4096];
      const ssize_t r = recv(fd_, b, std::min(sizeof(b), n - out.size()), 0);
      if (r <= 0) return "";
      out.append(b, r);
    }
    return out;
  }
  template <typename T>
  T ReadInt() {
    std::string b = Read(sizeof(T));
    REQUIRE(b.size() == sizeof(T));
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= uint64_t(static_cast<unsigned char>(b[i])) << (8 * i);
    }
    return static_cast<T>(v);
  }
  std::string ReadBytes() { return Read(ReadInt<uint64_t>()); }
  // True when the server closed the connection within `timeout`.
  bool Closed(std::chrono::milliseconds timeout = 5s) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char b;
    return recv(fd_, &b, 1, 0) <= 0;
  }

 private:
  int fd_ = -1;
};

struct Served {
  explicit Served(AgentStore::Options o = {}) : store(std::move(o)) {
    StatusOr<int> p = store.Start("127.0.0.1", 0);
    REQUIRE(p.ok());
    port = *p;
  }
  AgentStore store;
  int port = 0;
};

}  // namespace ddprun::agent::store_test
