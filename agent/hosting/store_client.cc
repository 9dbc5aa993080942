#include "agent/hosting/store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "agent/hosting/store_protocol.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ddprun::agent {
namespace {

using Clock = StoreClient::Clock;

// ddprun_elastic.py's _ABSENT: no key of ours or of the workers holds it.
const std::string& PeekAbsent() {
  static const std::string* const kAbsent =
      new std::string("\0ddprun-absent", 14);
  return *kAbsent;
}

// Milliseconds to `deadline` for poll(2), rounded up so that a wait does
// not end just before it; 0 once it passed.
int MillisLeft(Clock::time_point deadline) {
  const Clock::duration left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

std::string ErrnoText(const std::string& what, int err) {
  return ErrnoStatus(what, err).message();
}

// Until `fd` is ready for `events`, `cancel_fd` (-1: none) is readable, or
// `deadline` passes; `what` names the wait in errors.
Status PollUntil(int fd, short events, int cancel_fd,
                 Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int n = poll(p, cancel_fd >= 0 ? 2 : 1, MillisLeft(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(ErrnoText("poll while " + what, errno));
    }
    if (cancel_fd >= 0 && p[1].revents != 0) {
      return CancelledError(what + ": cancelled");
    }
    // An error or a hang-up counts as ready: the send or recv that follows
    // says which.
    if (p[0].revents != 0) return Status::Ok();
    if (MillisLeft(deadline) == 0) {
      return DeadlineExceededError(what + ": deadline exceeded");
    }
  }
}

struct FreeAddrInfo {
  void operator()(addrinfo* list) const {
    if (list != nullptr) freeaddrinfo(list);
  }
};
using AddrInfoList = std::unique_ptr<addrinfo, FreeAddrInfo>;

// One name's resolution, shared with the thread that runs getaddrinfo(3)
// (which takes no deadline): the caller stops waiting at its deadline and
// the thread finishes alone, freeing this when it is done.
struct Lookup {
  Lookup() {
    if (pipe2(done, O_CLOEXEC | O_NONBLOCK) != 0) done[0] = done[1] = -1;
  }
  ~Lookup() {
    for (int fd : done) {
      if (fd >= 0) close(fd);
    }
  }
  int done[2] = {-1, -1};  // readable once the answer is in
  Mutex mu;
  int error GUARDED_BY(mu) = 0;
  AddrInfoList found GUARDED_BY(mu);
};

addrinfo StreamHints(int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  return hints;
}

StatusOr<AddrInfoList> Resolve(const std::string& host, int port, int cancel_fd,
                               Clock::time_point deadline) {
  const std::string service = std::to_string(port);
  const addrinfo hints = StreamHints(AI_NUMERICHOST | AI_NUMERICSERV);
  addrinfo* numeric = nullptr;
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &numeric) == 0) {
    return AddrInfoList(numeric);
  }
  auto lookup = std::make_shared<Lookup>();
  if (lookup->done[0] < 0) {
    return UnavailableError(ErrnoText("resolving '" + host + "': pipe", errno));
  }
  std::thread([lookup, host, service] {
    const addrinfo any = StreamHints(AI_NUMERICSERV);
    addrinfo* found = nullptr;
    const int error = getaddrinfo(host.c_str(), service.c_str(), &any, &found);
    {
      MutexLock lock(&lookup->mu);
      lookup->error = error;
      lookup->found.reset(error == 0 ? found : nullptr);
    }
    if (write(lookup->done[1], "x", 1) < 0) {
      // Full cannot happen (one byte, once); the waiter then times out.
    }
  }).detach();
  DDP_RETURN_IF_ERROR(PollUntil(lookup->done[0], POLLIN, cancel_fd, deadline,
                                "resolving '" + host + "'"));
  MutexLock lock(&lookup->mu);
  if (lookup->error != 0) {
    return UnavailableError("cannot resolve '" + host +
                            "': " + gai_strerror(lookup->error));
  }
  return std::move(lookup->found);
}

}  // namespace

StoreClient::StoreClient(int cancel_fd) : cancel_fd_(cancel_fd) {}

StoreClient::~StoreClient() { Close(); }

void StoreClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status StoreClient::Connect(const std::string& host, int port,
                            Clock::time_point deadline) {
  Close();
  const std::string peer =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
      std::to_string(port);
  DDP_ASSIGN_OR_RETURN(AddrInfoList list,
                       Resolve(host, port, cancel_fd_, deadline));
  Status last = UnavailableError("cannot connect to " + peer);
  for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = UnavailableError(ErrnoText("cannot connect to " + peer, errno));
      continue;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        Status ready = PollUntil(fd, POLLOUT, cancel_fd_, deadline,
                                 "connecting to " + peer);
        if (!ready.ok()) {
          close(fd);
          return ready;
        }
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err != 0) {
      close(fd);
      last = UnavailableError(ErrnoText("cannot connect to " + peer, err));
      continue;
    }
    // Each query is one small write followed by a wait for its reply:
    // Nagle's algorithm would hold it back for the previous one's ACK.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    peer_ = peer;
    return Status::Ok();
  }
  return last;
}

Status StoreClient::Fail(Status error) {
  Close();
  return error;
}

Status StoreClient::WaitReady(short events, Clock::time_point deadline) const {
  return PollUntil(fd_, events, cancel_fd_, deadline,
                   "a query to the store at " + peer_);
}

Status StoreClient::Transfer(size_t n, short events, Clock::time_point deadline,
                             const std::function<ssize_t(size_t at)>& io) {
  if (fd_ < 0) return UnavailableError("not connected to a store");
  size_t at = 0;
  while (at < n) {
    const ssize_t r = io(at);
    if (r > 0) {
      at += static_cast<size_t>(r);
    } else if (r == 0) {  // recv's end of stream
      return Fail(
          UnavailableError("the store at " + peer_ + " closed the connection"));
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Status ready = WaitReady(events, deadline);
      if (!ready.ok()) return Fail(ready);
    } else {
      return Fail(UnavailableError(ErrnoText(
          "the connection to the store at " + peer_ + " was lost", errno)));
    }
  }
  return Status::Ok();
}

Status StoreClient::SendAll(const std::string& bytes,
                            Clock::time_point deadline) {
  return Transfer(bytes.size(), POLLOUT, deadline, [&](size_t at) {
    return send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
  });
}

Status StoreClient::RecvExact(char* data, size_t n,
                              Clock::time_point deadline) {
  return Transfer(n, POLLIN, deadline,
                  [&](size_t at) { return recv(fd_, data + at, n - at, 0); });
}

StatusOr<std::string> StoreClient::RecvBytes(Clock::time_point deadline) {
  char length[8];
  DDP_RETURN_IF_ERROR(RecvExact(length, sizeof(length), deadline));
  const uint64_t n = StoreWireU64(length);
  if (n > max_reply_bytes_) {
    return Fail(InvalidArgumentError(
        "a reply of " + std::to_string(n) + " bytes from the store at " +
        peer_ + " (limit " + std::to_string(max_reply_bytes_) + ")"));
  }
  std::string value(static_cast<size_t>(n), '\0');
  DDP_RETURN_IF_ERROR(RecvExact(value.data(), value.size(), deadline));
  return value;
}

Status StoreClient::Set(const std::string& key, const std::string& value,
                        Clock::time_point deadline) {
  StoreRequest set;
  set.op = StoreOp::kSet;
  set.keys = {key};
  set.values = {value};
  std::string query;
  DDP_RETURN_IF_ERROR(AppendLegacyQuery(set, &query));
  return SendAll(query, deadline);
}

StatusOr<std::optional<std::string>> StoreClient::Peek(
    const std::string& key, Clock::time_point deadline) {
  StoreRequest peek;
  peek.op = StoreOp::kCompareSet;
  peek.keys = {key};
  peek.values = {PeekAbsent(), PeekAbsent()};
  std::string query;
  DDP_RETURN_IF_ERROR(AppendLegacyQuery(peek, &query));
  DDP_RETURN_IF_ERROR(SendAll(query, deadline));
  DDP_ASSIGN_OR_RETURN(std::string value, RecvBytes(deadline));
  if (value == PeekAbsent()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(value));
}

StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta,
                                   Clock::time_point deadline) {
  StoreRequest add;
  add.op = StoreOp::kAdd;
  add.keys = {key};
  add.delta = delta;
  std::string query;
  DDP_RETURN_IF_ERROR(AppendLegacyQuery(add, &query));
  DDP_RETURN_IF_ERROR(SendAll(query, deadline));
  char sum[8];
  DDP_RETURN_IF_ERROR(RecvExact(sum, sizeof(sum), deadline));
  const uint64_t bits = StoreWireU64(sum);
  int64_t value = 0;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace ddprun::agent
