#include "agent/hosting/agent_store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <vector>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After accept4() runs out of descriptors, or poll(2) fails.
constexpr milliseconds kPauseAfterError{100};

size_t DefaultMaxConnections() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
    return 4096;
  }
  return std::max<size_t>(64, static_cast<size_t>(rl.rlim_cur) / 2);
}

}  // namespace

bool AgentStore::LogThrottle::Allow() {
  constexpr int kBurst = 20;
  MutexLock lock(&mu);
  const SteadyClock::time_point now = SteadyClock::now();
  if (now - window >= std::chrono::seconds(10)) {
    if (suppressed > 0) {
      DDP_LOG(WARNING) << "agent store: " << suppressed
                       << " more warnings in 10 s were not shown";
    }
    window = now;
    lines = 0;
    suppressed = 0;
  }
  if (lines < kBurst) {
    ++lines;
    return true;
  }
  ++suppressed;
  return false;
}

AgentStore::AgentStore(Options options)
    : options_(std::move(options)),
      store_(
          KeyStore::Limits{options_.max_value_bytes, options_.max_store_bytes},
          [this](KeyStore::WaiterId id) {
            // Inside a run on the loop thread (Reset drops waits
            // without calling this).
            auto it = conns_.find(id);
            if (it != conns_.end()) it->second->session().WaitDone();
          }) {
  session_options_.wire.max_value_bytes = options_.max_value_bytes;
  session_options_.max_wait = options_.max_wait;
}

AgentStore::~AgentStore() { Stop(); }

StatusOr<int> AgentStore::Start(const std::string& host, int port) {
  MutexLock lock(&start_mu_);
  if (started_ || stop_) {
    return FailedPreconditionError("agent store started before");
  }
  int fd = -1;
  DDP_ASSIGN_OR_RETURN(const int bound, ListenOn(host, port, &fd));
  port_ = bound;
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(fd);
    return InternalError(std::string("pipe2: ") + std::strerror(errno));
  }
  {
    MutexLock w(&wake_mu_);
    wake_[0] = wake[0];
    wake_[1] = wake[1];
  }
  wake_read_ = wake[0];
  listen_fd_ = fd;
  ConnectionQuota::Limits limits;
  limits.max_total = options_.max_connections != 0 ? options_.max_connections
                                                   : DefaultMaxConnections();
  limits.max_per_host = options_.max_connections_per_host;
  limits.max_unidentified = options_.max_unidentified;
  limits.first_message_timeout = options_.first_message_timeout;
  quota_ = std::make_unique<ConnectionQuota>(limits);
  try {
    thread_ = std::thread([this] { Loop(); });
  } catch (const std::exception& e) {
    close(fd);
    listen_fd_ = -1;
    MutexLock w(&wake_mu_);
    for (int& end : wake_) {
      close(end);
      end = -1;
    }
    return InternalError(std::string("agent store thread: ") + e.what());
  }
  started_ = true;
  return port_.load();
}

size_t AgentStore::num_keys() const {
  MutexLock lock(&mu_);
  return store_.num_keys();
}

void AgentStore::Set(const std::string& key, std::string value) {
  {
    MutexLock lock(&mu_);
    own_sets_.emplace_back(key, std::move(value));
  }
  Notify();
}

std::optional<std::string> AgentStore::Get(const std::string& key) const {
  MutexLock lock(&mu_);
  KeyStore::Value v = store_.Get(key);
  if (v == nullptr) return std::nullopt;
  return *v;
}

void AgentStore::Notify() {
  MutexLock lock(&wake_mu_);
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
}

void AgentStore::Reset(const std::string& why) {
  size_t keys = 0;
  size_t closed = 0;
  {
    MutexLock lock(&mu_);
    keys = store_.Clear();
    own_sets_.clear();
    ++generation_;
    // Their next run sees the new generation; until then they cannot send
    // anything of the dropped state.
    for (const auto& [id, fd] : store_fds_) shutdown(fd, SHUT_RDWR);
    closed = store_fds_.size();
    store_fds_.clear();
  }
  Notify();
  if (keys > 0 || closed > 0) {
    DDP_LOG(INFO) << "agent store: " << why << ": dropped " << keys
                  << " keys and closed " << closed << " worker connections";
  }
}

void AgentStore::Stop() {
  MutexLock lock(&start_mu_);
  stop_ = true;
  if (!started_) return;
  started_ = false;
  Notify();
  if (thread_.joinable()) thread_.join();
  {
    // First: a Reset() from now on must not shut a descriptor down after
    // it is closed (and its number reused).
    MutexLock m(&mu_);
    store_fds_.clear();
  }
  conns_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  MutexLock w(&wake_mu_);
  for (int& fd : wake_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void AgentStore::Close(StoreConnection* c, const std::string& reason) {
  if (c->dead) return;
  if (!reason.empty() && throttle_.Allow()) {
    DDP_LOG(WARNING) << "agent store: closing the connection from " << c->peer()
                     << ": " << reason;
  }
  c->dead = true;
}

void AgentStore::Loop() {
  while (!stop_.load()) {
    try {
      Turn();
    } catch (const std::exception& e) {
      // Each connection's work catches its own; this is the loop's own
      // bookkeeping failing (out of memory). Serve on.
      if (throttle_.Allow()) {
        DDP_LOG(ERROR) << "agent store: " << e.what() << "; serving on";
      }
      std::this_thread::sleep_for(kPauseAfterError);
    }
  }
}

void AgentStore::Turn() {
  SteadyClock::time_point now = SteadyClock::now();
  SteadyClock::time_point next = SteadyClock::time_point::max();
  for (const ConnectionQuota::Expired& e : quota_->Expire(now, &next)) {
    auto it = conns_.find(e.id);
    if (it != conns_.end()) Close(it->second.get(), e.reason);
  }
  for (auto& [id, c] : conns_) {
    if (c->session().wait_deadline() <= now) {
      Close(c.get(), "a WAIT outlived the store's limit of " +
                         std::to_string(options_.max_wait.count()) + " ms");
    }
  }
  Reap();
  {
    // The agent's own sets, on this thread: waking a waiter touches its
    // connection.
    MutexLock lock(&mu_);
    for (auto& [key, value] : own_sets_) {
      Status set = store_.Set(key, std::move(value));
      if (!set.ok()) {
        DDP_LOG(ERROR) << "agent store: the agent's key " << key << ": "
                       << set.message();
      }
    }
    own_sets_.clear();
  }
  std::vector<pollfd> fds;
  std::vector<StoreConnection*> polled;
  fds.push_back({listen_fd_, POLLIN, 0});
  fds.push_back({wake_read_, POLLIN, 0});
  bool busy = false;  // a session with queries left that may run now
  for (auto& [id, c] : conns_) {
    fds.push_back({c->fd(), c->PollEvents(now, &next), 0});
    polled.push_back(c.get());
    busy = busy || (c->runnable && c->session().replies()->size() <=
                                       session_options_.reply_high_water);
  }
  int timeout_ms = -1;
  if (busy) {
    timeout_ms = 0;
  } else if (next != SteadyClock::time_point::max()) {
    const auto ms =
        std::chrono::duration_cast<milliseconds>(next - now).count() + 1;
    timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
  }
  if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
    if (errno == EINTR) return;
    // Not expected (ENOMEM); the store must keep serving its workers.
    if (throttle_.Allow()) {
      DDP_LOG(ERROR) << "agent store: poll: " << std::strerror(errno)
                     << "; retrying";
    }
    std::this_thread::sleep_for(kPauseAfterError);
    return;
  }
  if (fds[1].revents != 0) {
    char buf[64];
    while (read(wake_read_, buf, sizeof(buf)) > 0) {
    }
  }
  if (stop_.load()) return;
  now = SteadyClock::now();
  if (fds[0].revents & POLLIN) AcceptAll();
  for (size_t i = 0; i < polled.size(); ++i) {
    StoreConnection* c = polled[i];
    const short ev = fds[i + 2].revents;
    if (c->dead) continue;  // closed to make room for a new one
    try {
      Serve(c, ev, now);
    } catch (const std::bad_alloc&) {
      Close(c, "out of memory while serving it");
    } catch (const std::exception& e) {
      Close(c, e.what());
    }
  }
  Reap();
}

void AgentStore::AcceptAll() {
  // A bounded batch per round: a connection flood cannot keep the loop
  // from serving the clients it has (the rest wait in the backlog).
  constexpr int kAcceptsPerTurn = 256;
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Without the accept guard (common/accept_guard.h) the pending
        // connection stays and poll(2) reports it at once: pause instead
        // of spinning.
        if (throttle_.Allow()) {
          DDP_LOG(WARNING) << "agent store: accept: " << std::strerror(errno);
        }
        std::this_thread::sleep_for(kPauseAfterError);
      }
      return;
    }
    // A reply goes out at once, as torch's own TCPStore server sends it:
    // with Nagle a small reply behind an unacknowledged one waits for the
    // client's delayed ACK (~40 ms a step in the step agreement of
    // --restart_scope failed, which makes several round trips a step).
    const int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t id = next_id_++;
    auto c =
        std::make_unique<StoreConnection>(id, fd, ss, len, &session_options_);
    {
      MutexLock lock(&mu_);
      c->generation = generation_;
    }
    const ConnectionQuota::Admission a =
        quota_->Admit(id, c->host(), SteadyClock::now());
    for (uint64_t victim : a.evict) {
      auto it = conns_.find(victim);
      if (it == conns_.end()) continue;
      Close(it->second.get(),
            "it had not sent a whole first message and " +
                std::to_string(quota_->limits().max_unidentified) +
                " such connections (or a connection limit) were reached");
    }
    if (!a.admitted) {
      if (throttle_.Allow()) {
        DDP_LOG(WARNING) << "agent store: refused a connection from "
                         << c->peer() << ": " << a.refusal;
      }
      continue;  // `c` closes it
    }
    conns_.emplace(id, std::move(c));
  }
}

void AgentStore::Serve(StoreConnection* c, short revents,
                       SteadyClock::time_point now) {
  std::string reason;
  if (c->sniffing()) {
    if (revents == 0) return;
    const bool ok = c->Sniff(now, &reason);
    if (c->spoke()) quota_->Spoke(c->id(), now);
    if (!ok) return Close(c, reason);
    if (c->http2()) {
      c->dead = true;  // Reap() hands it to on_http2
      return;
    }
    if (c->sniffing()) return;
  }
  bool got = false;
  if (!c->Read(revents, &got)) return Close(c, "");
  if ((got || c->runnable) &&
      c->session().replies()->size() <= session_options_.reply_high_water) {
    RunSession(c, now);
  }
  if (!c->dead && !c->Flush()) Close(c, "");
}

void AgentStore::RunSession(StoreConnection* c, SteadyClock::time_point now) {
  std::string error;
  bool close_it = false;
  bool identified_now = false;
  {
    MutexLock lock(&mu_);
    if (c->generation != generation_) {
      // Reset() closed it, or it is a store client that connected before
      // the round it belongs to ended.
      close_it = true;
      if (!c->registered) {
        error =
            "a TCPStore client connected before the round it belongs to "
            "ended";
      }
    } else {
      StatusOr<StoreSession::Progress> p = c->session().Run(&store_, now);
      if (!p.ok()) {
        close_it = true;
        error = p.status().message();
      } else {
        c->runnable = *p != StoreSession::Progress::kNeedInput;
      }
      if (!c->registered && c->session().identified()) {
        store_fds_[c->id()] = c->fd();
        c->registered = true;
        identified_now = true;
      }
    }
  }
  if (identified_now) quota_->Identified(c->id());
  if (close_it) Close(c, error);
}

void AgentStore::Reap() {
  std::vector<uint64_t> dead;
  for (auto& [id, c] : conns_) {
    if (c->dead) dead.push_back(id);
  }
  if (dead.empty()) return;
  {
    MutexLock lock(&mu_);
    for (uint64_t id : dead) {
      store_fds_.erase(id);
      store_.CancelWait(id);
    }
  }
  std::vector<int> handoff;
  for (uint64_t id : dead) {
    auto it = conns_.find(id);
    quota_->Remove(id);
    if (it->second->http2()) handoff.push_back(it->second->ReleaseFd());
    conns_.erase(it);  // closes the others
  }
  // Handed-off descriptors belong to the rendezvous server now.
  for (int fd : handoff) {
    if (options_.on_http2) {
      options_.on_http2(fd);
    } else {
      close(fd);
    }
  }
}

}  // namespace ddprun::agent
