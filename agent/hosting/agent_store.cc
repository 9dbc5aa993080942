#include "agent/hosting/agent_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kValidateMagic = 0x3C85F7CE;
constexpr size_t kMaxKeyBytes = size_t{1} << 20;
constexpr uint64_t kMaxCount = uint64_t{1} << 20;

// The queries, independent of the dialect's numbering.
enum class Op {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDelete,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kUnsupported,
};

Op LegacyOp(uint8_t t) {
  static const Op kOps[] = {
      Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,    Op::kCheck,
      Op::kWait,     Op::kNumKeys,    Op::kWatchKey,  Op::kDelete, Op::kAppend,
      Op::kMultiGet, Op::kMultiSet,   Op::kCancelWait};
  return t < sizeof(kOps) / sizeof(kOps[0]) ? kOps[t] : Op::kUnsupported;
}

Op ModernOp(uint8_t t) {
  static const Op kOps[] = {
      Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,    Op::kAdd,
      Op::kCheck,    Op::kWait,     Op::kNumKeys,    Op::kDelete, Op::kAppend,
      Op::kMultiGet, Op::kMultiSet, Op::kCancelWait, Op::kPing};
  return t < sizeof(kOps) / sizeof(kOps[0]) ? kOps[t] : Op::kUnsupported;
}

// Reads little-endian values from the front of a buffer without consuming
// it; a read past the end sets `short_`, an oversized length `bad_`.
class Reader {
 public:
  explicit Reader(const std::string& buf) : buf_(buf) {}
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U32(uint32_t* v) { return Int(v); }
  bool U64(uint64_t* v) { return Int(v); }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!Int(&u)) return false;
    std::memcpy(v, &u, sizeof(u));
    return true;
  }
  bool Bytes(std::string* out, size_t limit, const char* what) {
    uint64_t n;
    if (!U64(&n)) return false;
    if (n > limit) {
      error_ = std::string(what) + " of " + std::to_string(n) +
               " bytes (limit " + std::to_string(limit) + ")";
      return false;
    }
    if (buf_.size() - pos_ < n) {
      short_ = true;
      return false;
    }
    out->assign(buf_, pos_, n);
    pos_ += n;
    return true;
  }
  bool Count(uint64_t* n) {
    if (!U64(n)) return false;
    if (*n > kMaxCount) {
      error_ = "a count of " + std::to_string(*n) + " (limit " +
               std::to_string(kMaxCount) + ")";
      return false;
    }
    return true;
  }
  size_t pos() const { return pos_; }
  bool short_read() const { return short_; }
  const std::string& error() const { return error_; }

 private:
  template <typename T>
  bool Int(T* v) {
    unsigned char b[sizeof(T)];
    if (!Raw(b, sizeof(T))) return false;
    T x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= T(b[i]) << (8 * i);
    *v = x;
    return true;
  }
  bool Raw(void* dst, size_t n) {
    if (buf_.size() - pos_ < n) {
      short_ = true;
      return false;
    }
    std::memcpy(dst, buf_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  const std::string& buf_;
  size_t pos_ = 0;
  bool short_ = false;
  std::string error_;
};

template <typename T>
void PutInt(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(
        static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
  }
}

void PutBytes(std::string* out, const std::string& b) {
  PutInt<uint64_t>(out, b.size());
  out->append(b);
}

std::string PeerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host),
                  port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host) + ":" + port;
}

// Parses the integer an ADD increments (torch stores it as decimal text).
bool ParseInt64(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0) return false;
  *v = x;
  return true;
}

}  // namespace

AgentStore::AgentStore(Options options) : options_(std::move(options)) {}

AgentStore::~AgentStore() { Stop(); }

StatusOr<int> AgentStore::Start(const std::string& host, int port) {
  MutexLock lock(&mu_);
  if (listen_fd_ >= 0 || stop_) {
    return FailedPreconditionError("agent store started before");
  }
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
  port_ = ntohs(ss.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(fd);
    return InternalError(std::string("pipe2: ") + std::strerror(errno));
  }
  listen_fd_ = fd;
  thread_ = std::thread([this] { Loop(); });
  return port_;
}

int AgentStore::port() const {
  MutexLock lock(&mu_);
  return port_;
}

size_t AgentStore::num_keys() const {
  MutexLock lock(&mu_);
  return keys_.size();
}

void AgentStore::Notify() {
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
}

void AgentStore::Reset(const std::string& why) {
  int closed = 0;
  size_t keys = 0;
  {
    MutexLock lock(&mu_);
    keys = keys_.size();
    keys_.clear();
    for (auto& [id, c] : conns_) {
      if (c->dead) continue;
      if (c->kind == Kind::kStore) {
        c->dead = true;
        shutdown(c->fd, SHUT_RDWR);
        ++closed;
      } else {
        c->stale = true;
      }
    }
  }
  Notify();
  if (keys > 0 || closed > 0) {
    DDP_LOG(INFO) << "agent store: " << why << ": dropped " << keys
                  << " keys and closed " << closed << " worker connections";
  }
}

void AgentStore::Stop() {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  Notify();
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  for (auto& [id, c] : conns_) close(c->fd);
  conns_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  for (int& fd : wake_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void AgentStore::Close(Conn* c, const std::string& reason) {
  if (!reason.empty()) {
    DDP_LOG(WARNING) << "agent store: closing the connection from " << c->peer
                     << ": " << reason;
  }
  c->dead = true;
}

void AgentStore::Loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    std::vector<int> handoff;
    int timeout_ms = -1;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      const SteadyClock::time_point now = SteadyClock::now();
      SteadyClock::time_point next = SteadyClock::time_point::max();
      for (auto it = conns_.begin(); it != conns_.end();) {
        Conn* c = it->second.get();
        if (!c->dead && !c->waiting.empty() && now >= c->wait_deadline) {
          Close(c, "a WAIT outlived the store's limit of " +
                       std::to_string(options_.max_wait.count()) + " ms");
        }
        if (!c->dead && c->kind == Kind::kUnknown && !c->in.empty() &&
            now >= c->since + options_.sniff_timeout) {
          Close(c, "an incomplete first message");
        }
        if (c->dead) {
          close(c->fd);
          it = conns_.erase(it);
          continue;
        }
        if (!c->waiting.empty()) next = std::min(next, c->wait_deadline);
        if (c->kind == Kind::kUnknown && !c->in.empty()) {
          next = std::min(next, c->since + options_.sniff_timeout);
        }
        ++it;
      }
      fds.clear();
      ids.clear();
      fds.push_back({listen_fd_, POLLIN, 0});
      fds.push_back({wake_[0], POLLIN, 0});
      for (auto& [id, c] : conns_) {
        short events = POLLIN;
        if (!c->out.empty()) events |= POLLOUT;
        fds.push_back({c->fd, events, 0});
        ids.push_back(id);
      }
      if (next != SteadyClock::time_point::max()) {
        timeout_ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(next - now)
                .count() +
            1);
      }
    }
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      DDP_LOG(ERROR) << "agent store: poll: " << std::strerror(errno);
      return;
    }
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      if (fds[1].revents != 0) {
        char buf[64];
        while (read(wake_[0], buf, sizeof(buf)) > 0) {
        }
      }
      if (fds[0].revents & POLLIN) AcceptAll();
      for (size_t i = 0; i < ids.size(); ++i) {
        const short ev = fds[i + 2].revents;
        if (ev == 0) continue;
        auto it = conns_.find(ids[i]);
        if (it == conns_.end() || it->second->dead) continue;
        Conn* c = it->second.get();
        if ((ev & POLLOUT) && !Flush(c)) continue;
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
          if (!Serve(c, &handoff)) continue;
        }
      }
      // Handed-off descriptors belong to the rendezvous server now.
      for (auto it = conns_.begin(); it != conns_.end();) {
        if (it->second->fd < 0) {
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (int fd : handoff) options_.on_http2(fd);
  }
}

void AgentStore::AcceptAll() {
  for (;;) {
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a connection that vanished
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = PeerOf(fd);
    c->since = SteadyClock::now();
    conns_.emplace(next_id_++, std::move(c));
  }
}

bool AgentStore::Sniff(Conn* c, std::vector<int>* handoff) {
  char buf[4];
  const ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_PEEK);
  if (n == 0) {
    Close(c, "");
    return false;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return true;
    Close(c, "");
    return false;
  }
  static const char kPreface[] = "PRI ";
  if (buf[0] == 'P') {
    if (std::memcmp(buf, kPreface, n) != 0) {
      Close(c, "neither HTTP/2 nor a TCPStore query");
      return false;
    }
    if (n < 4) {
      // The preface comes in one segment in practice; a split one is
      // peeked again on every poll (a spin bounded by sniff_timeout).
      c->in.assign(buf, n);  // only marks the sniff deadline; not consumed
      return true;
    }
    handoff->push_back(c->fd);
    c->fd = -1;
    c->dead = true;
    return false;
  }
  if (buf[0] == 0x16) {
    Close(c,
          "a TLS handshake (the rendezvous on the agent store's port "
          "serves no TLS)");
    return false;
  }
  if (c->stale) {
    Close(c,
          "a TCPStore client connected before the round it belongs to "
          "ended");
    return false;
  }
  c->in.clear();
  c->kind = Kind::kStore;
  return true;
}

bool AgentStore::Serve(Conn* c, std::vector<int>* handoff) {
  if (c->kind == Kind::kUnknown && !Sniff(c, handoff)) return false;
  if (c->kind == Kind::kUnknown) return true;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
    if (n == 0) {
      Close(c, "");
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      Close(c, "");
      return false;
    }
    c->in.append(buf, n);
    if (c->in.size() > options_.max_value_bytes + kMaxKeyBytes + 64) break;
  }
  for (;;) {
    std::string error;
    const Parsed p = ParseOne(c, &error);
    if (p == Parsed::kBad) {
      Close(c, error);
      return false;
    }
    if (p == Parsed::kNeedMore) {
      if (c->in.size() > options_.max_value_bytes + kMaxKeyBytes + 64) {
        Close(c, "a message over the size limit");
        return false;
      }
      break;
    }
  }
  return Flush(c);
}

bool AgentStore::Flush(Conn* c) {
  while (!c->out.empty()) {
    const ssize_t n = send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      Close(c, "");
      return false;
    }
    c->out.erase(0, n);
  }
  return true;
}

void AgentStore::Wake(const std::string& key) {
  for (auto& [id, other] : conns_) {
    Conn* w = other.get();
    if (w->dead || w->waiting.erase(key) == 0 || !w->waiting.empty()) continue;
    w->out.push_back(0);  // STOP_WAITING
    Flush(w);
  }
}

void AgentStore::Set(const std::string& key, std::string value) {
  keys_[key] = std::move(value);
  Wake(key);
}

AgentStore::Parsed AgentStore::ParseOne(Conn* c, std::string* error) {
  if (c->in.empty()) return Parsed::kNeedMore;
  Reader r(c->in);
  uint8_t type = 0;
  r.U8(&type);
  if (c->dialect == Dialect::kUnknown) {
    uint32_t magic = 0;
    if (c->in.size() >= 4) {
      Reader m(c->in);
      m.U32(&magic);
      if (magic == kValidateMagic) {
        *error =
            "torch 2.1's TCPStore dialect (a magic number before every "
            "query) is not served";
        return Parsed::kBad;
      }
    }
    if (type != 0) {
      c->dialect = Dialect::kLegacy;
    } else {
      if (c->in.size() < 5) return Parsed::kNeedMore;
      Reader m(c->in);
      m.U8(&type);
      m.U32(&magic);
      c->dialect =
          magic == kValidateMagic ? Dialect::kModern : Dialect::kLegacy;
    }
  }
  const Op op =
      c->dialect == Dialect::kModern ? ModernOp(type) : LegacyOp(type);
  std::string key, value, value2;
  std::string& out = c->out;
  std::string reply;
  bool ok = false;
  switch (op) {
    case Op::kValidate: {
      uint32_t magic = 0;
      ok = r.U32(&magic);
      if (ok && magic != kValidateMagic) {
        *error = "VALIDATE with a wrong magic number";
        return Parsed::kBad;
      }
      break;
    }
    case Op::kPing: {
      uint32_t nonce = 0;
      ok = r.U32(&nonce);
      if (ok) PutInt(&reply, nonce);
      break;
    }
    case Op::kSet:
      ok = r.Bytes(&key, kMaxKeyBytes, "a key") &&
           r.Bytes(&value, options_.max_value_bytes, "a value");
      if (ok) Set(key, std::move(value));
      break;
    case Op::kAppend:
      ok = r.Bytes(&key, kMaxKeyBytes, "a key") &&
           r.Bytes(&value, options_.max_value_bytes, "a value");
      if (ok) {
        keys_[key].append(value);
        Wake(key);
      }
      break;
    case Op::kCompareSet:
      ok = r.Bytes(&key, kMaxKeyBytes, "a key") &&
           r.Bytes(&value, options_.max_value_bytes, "a value") &&
           r.Bytes(&value2, options_.max_value_bytes, "a value");
      if (ok) {
        auto it = keys_.find(key);
        if (it == keys_.end()) {
          if (value.empty()) {
            PutBytes(&reply, value2);
            Set(key, value2);
          } else {
            PutBytes(&reply, value);
          }
        } else {
          if (it->second == value) it->second = value2;
          PutBytes(&reply, it->second);
        }
      }
      break;
    case Op::kGet:
      ok = r.Bytes(&key, kMaxKeyBytes, "a key");
      if (ok) {
        auto it = keys_.find(key);
        if (it == keys_.end()) {
          *error = "GET of a missing key";
          return Parsed::kBad;
        }
        PutBytes(&reply, it->second);
      }
      break;
    case Op::kAdd: {
      int64_t delta = 0;
      ok = r.Bytes(&key, kMaxKeyBytes, "a key") && r.I64(&delta);
      if (ok) {
        int64_t v = 0;
        auto it = keys_.find(key);
        if (it != keys_.end() && !ParseInt64(it->second, &v)) {
          *error = "ADD to a value that is not an integer";
          return Parsed::kBad;
        }
        v = static_cast<int64_t>(static_cast<uint64_t>(v) +
                                 static_cast<uint64_t>(delta));
        PutInt(&reply, v);
        Set(key, std::to_string(v));
      }
      break;
    }
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet: {
      uint64_t n = 0;
      ok = r.Count(&n);
      std::vector<std::string> keys;
      for (uint64_t i = 0; ok && i < n; ++i) {
        keys.emplace_back();
        ok = r.Bytes(&keys.back(), kMaxKeyBytes, "a key");
      }
      if (!ok) break;
      if (op == Op::kMultiGet) {
        for (const std::string& k : keys) {
          auto it = keys_.find(k);
          if (it == keys_.end()) {
            *error = "MULTI_GET of a missing key";
            return Parsed::kBad;
          }
          PutBytes(&reply, it->second);
        }
        break;
      }
      std::set<std::string> missing;
      for (const std::string& k : keys) {
        if (keys_.count(k) == 0) missing.insert(k);
      }
      if (op == Op::kCheck) {
        reply.push_back(missing.empty() ? 0 : 1);
      } else if (missing.empty()) {
        reply.push_back(0);  // STOP_WAITING
      } else {
        c->waiting = std::move(missing);
        c->wait_deadline = SteadyClock::now() + options_.max_wait;
      }
      break;
    }
    case Op::kMultiSet: {
      uint64_t n = 0;
      ok = r.Count(&n);
      std::vector<std::pair<std::string, std::string>> kv;
      for (uint64_t i = 0; ok && i < n; ++i) {
        kv.emplace_back();
        ok = r.Bytes(&kv.back().first, kMaxKeyBytes, "a key") &&
             r.Bytes(&kv.back().second, options_.max_value_bytes, "a value");
      }
      if (ok) {
        for (auto& [k, v] : kv) Set(k, std::move(v));
      }
      break;
    }
    case Op::kNumKeys:
      ok = true;
      PutInt<int64_t>(&reply, static_cast<int64_t>(keys_.size()));
      break;
    case Op::kDelete:
      ok = r.Bytes(&key, kMaxKeyBytes, "a key");
      if (ok) PutInt<int64_t>(&reply, static_cast<int64_t>(keys_.erase(key)));
      break;
    case Op::kCancelWait:
      ok = true;
      c->waiting.clear();
      reply.push_back(1);  // WAIT_CANCELED
      break;
    case Op::kWatchKey:
      *error = "WATCH_KEY (torch 1.13's watch_key) is not served";
      return Parsed::kBad;
    case Op::kUnsupported:
      *error = "query type " + std::to_string(type) + " is not served (" +
               (c->dialect == Dialect::kModern ? "torch >= 2.2 dialect"
                                               : "torch 1.13 dialect") +
               ")";
      return Parsed::kBad;
  }
  if (!ok) {
    if (!r.error().empty()) {
      *error = r.error();
      return Parsed::kBad;
    }
    return Parsed::kNeedMore;
  }
  c->in.erase(0, r.pos());
  out.append(reply);
  return Parsed::kDone;
}

}  // namespace ddprun::agent
