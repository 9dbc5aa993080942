#include "agent/hosting/store_connection.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddprun::agent {
namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr int kReadsPerTurn = 4;
constexpr int kIovecs = 64;
constexpr std::chrono::milliseconds kMaxSniffBackoff{100};

}  // namespace

StatusOr<int> ListenOn(const std::string& host, int port, int* fd_out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                              service.c_str(), &hints, &res);
  if (gai != 0) {
    return InvalidArgumentError("agent store address " + host + ": " +
                                gai_strerror(gai));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
      break;
    }
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return UnavailableError("cannot listen on " + host + ":" + service + ": " +
                            error);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *fd_out = fd;
  return ntohs(ss.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

StoreConnection::StoreConnection(uint64_t id, int fd,
                                 const sockaddr_storage& peer,
                                 socklen_t peer_len,
                                 const StoreSession::Options* options)
    : id_(id), fd_(fd), session_(id, options) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&peer), peer_len, h,
                  sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    host_ = h;
    peer_ = host_ + ":" + p;
  } else {
    host_ = peer_ = "?";
  }
}

StoreConnection::~StoreConnection() {
  if (fd_ >= 0) close(fd_);
}

int StoreConnection::ReleaseFd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

short StoreConnection::PollEvents(TimePoint now, TimePoint* next) {
  if (sniffing_) {
    if (now >= sniff_retry_) return POLLIN;
    *next = std::min(*next, sniff_retry_);
    return 0;
  }
  short events = 0;
  if (session_.WantsInput()) events |= POLLIN;
  if (!session_.replies()->empty()) events |= POLLOUT;
  *next = std::min(*next, session_.wait_deadline());
  return events;
}

bool StoreConnection::Sniff(TimePoint now, std::string* reason) {
  char buf[4];
  const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_PEEK);
  if (n <= 0) {
    reason->clear();
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }
  spoke_ = true;
  switch (SniffFirstBytes(buf, static_cast<size_t>(n))) {
    case FirstBytes::kNeedMore:
      sniff_retry_ = now + sniff_backoff_;
      sniff_backoff_ = std::min(sniff_backoff_ * 2, kMaxSniffBackoff);
      return true;
    case FirstBytes::kHttp2:
      http2_ = true;
      sniffing_ = false;
      return true;
    case FirstBytes::kTls:
      *reason =
          "a TLS handshake (the rendezvous on the agent store's port serves "
          "no TLS)";
      return false;
    case FirstBytes::kUnknown:
      *reason = "neither HTTP/2 nor a TCPStore query";
      return false;
    case FirstBytes::kStore:
      sniffing_ = false;
      return true;
  }
  return true;
}

bool StoreConnection::Read(short revents, bool* got) {
  *got = false;
  if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0) return true;
  // Gone (POLLHUP, POLLERR) while it was not being read.
  if (!session_.WantsInput()) return (revents & (POLLHUP | POLLERR)) == 0;
  char buf[kReadChunk];
  for (int i = 0; i < kReadsPerTurn && session_.WantsInput(); ++i) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN;
    }
    session_.Append(buf, static_cast<size_t>(n));
    *got = true;
  }
  return true;
}

bool StoreConnection::Flush() {
  ReplyQueue* out = session_.replies();
  while (!out->empty()) {
    iovec iov[kIovecs];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(out->Peek(iov, kIovecs));
    const ssize_t sent = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN;
    }
    out->Consume(static_cast<size_t>(sent));
  }
  return true;
}

}  // namespace ddprun::agent
