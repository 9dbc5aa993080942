#include "agent/hosting/remote_worker_store.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "agent/hosting/store_client.h"
#include "agent/hosting/store_protocol.h"
#include "common/logging.h"

namespace ddprun::agent {

RemoteWorkerStore::RemoteWorkerStore() : RemoteWorkerStore(Options()) {}

RemoteWorkerStore::RemoteWorkerStore(Options options)
    : options_(options), wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (wake_fd_ < 0) {
    // The thread still works; only its waits are then cut short by their
    // deadlines instead of at once.
    DDP_LOG(WARNING)
        << ErrnoStatus("--restart_scope failed: eventfd", errno).message();
  }
  thread_ = std::thread([this] { Loop(); });
}

RemoteWorkerStore::~RemoteWorkerStore() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  Interrupt();
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void RemoteWorkerStore::Interrupt() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  // EAGAIN only when the counter is full: it is readable anyway.
  if (write(wake_fd_, &one, sizeof(one)) < 0) return;
}

void RemoteWorkerStore::DrainInterrupts() {
  if (wake_fd_ < 0) return;
  uint64_t count = 0;
  if (read(wake_fd_, &count, sizeof(count)) < 0) return;  // EAGAIN: none
}

Status RemoteWorkerStore::StartRound(
    const rendezvous::RendezvousResult& round) {
  const bool valid = !round.master_addr.empty() && round.master_port > 0 &&
                     round.master_port <= 65535;
  {
    MutexLock lock(&mu_);
    ++epoch_;
    host_ = valid ? round.master_addr : "";
    port_ = valid ? round.master_port : 0;
    queue_.clear();
    watched_.clear();
    values_.clear();
  }
  // State first, then the interrupt: the thread drains interrupts before it
  // reads the state, so it cannot miss this round.
  cv_.NotifyAll();
  Interrupt();
  if (!valid) {
    return InvalidArgumentError(
        "--restart_scope failed: round " + std::to_string(round.round) +
        " names no workers' store (MASTER_ADDR '" + round.master_addr +
        "', MASTER_PORT " + std::to_string(round.master_port) + ")");
  }
  return Status::Ok();
}

void RemoteWorkerStore::Set(const std::string& key, std::string value) {
  {
    MutexLock lock(&mu_);
    queue_.emplace_back(key, std::move(value));
  }
  cv_.NotifyAll();
}

std::optional<std::string> RemoteWorkerStore::Get(
    const std::string& key) const {
  bool first = false;
  std::optional<std::string> value;
  {
    MutexLock lock(&mu_);
    first = watched_.insert(key).second;
    auto it = values_.find(key);
    if (it != values_.end()) value = it->second;
  }
  if (first) cv_.NotifyAll();
  return value;
}

void RemoteWorkerStore::Loop() {
  StoreClient client(wake_fd_);
  uint64_t round = 0;  // the epoch the state below belongs to
  std::string host;
  int port = 0;
  std::deque<KeyValue> unconfirmed;
  std::vector<std::string> watched;
  std::chrono::milliseconds backoff = options_.min_backoff;
  bool failing = false;  // one warning per outage
  for (;;) {
    DrainInterrupts();
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stop_) return;
        if (epoch_ != round) {
          round = epoch_;
          host = host_;
          port = port_;
          unconfirmed.clear();
          client.Close();
          backoff = options_.min_backoff;
          failing = false;
        }
        for (KeyValue& set : queue_) unconfirmed.push_back(std::move(set));
        queue_.clear();
        if (port != 0 && (!unconfirmed.empty() || !watched_.empty())) break;
        cv_.Wait(&mu_);
      }
      watched.assign(watched_.begin(), watched_.end());
    }
    const Status s =
        Exchange(&client, host, port, round, &unconfirmed, watched);
    // CANCELLED: a new round or the destructor; the top sees which.
    if (s.code() == StatusCode::kCancelled) continue;
    std::chrono::milliseconds pause = options_.poll_interval;
    if (s.ok()) {
      if (failing) {
        DDP_LOG(INFO) << "--restart_scope failed: reached the workers' store "
                      << "at " << host << ":" << port << " again";
      }
      failing = false;
      backoff = options_.min_backoff;
    } else {
      client.Close();
      if (!failing) {
        DDP_LOG(WARNING) << "--restart_scope failed: the workers' store at "
                         << host << ":" << port << " is unreachable ("
                         << s.message() << "); retrying";
      }
      failing = true;
      pause = backoff;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    // A new Set or a newly watched key ends the pause between reads, not
    // the back-off after a failure.
    MutexLock lock(&mu_);
    const Clock::time_point until = Clock::now() + pause;
    while (
        !stop_ && epoch_ == round &&
        !(s.ok() && (!queue_.empty() || watched_.size() != watched.size()))) {
      if (!cv_.WaitUntil(&mu_, until)) break;
    }
  }
}

Status RemoteWorkerStore::Exchange(StoreClient* client, const std::string& host,
                                   int port, uint64_t round,
                                   std::deque<KeyValue>* unconfirmed,
                                   const std::vector<std::string>& watched) {
  if (!client->connected()) {
    DDP_RETURN_IF_ERROR(
        client->Connect(host, port, Clock::now() + options_.connect_timeout));
  }
  if (!unconfirmed->empty()) {
    const Clock::time_point deadline = Clock::now() + options_.query_timeout;
    for (const KeyValue& set : *unconfirmed) {
      DDP_RETURN_IF_ERROR(
          client->Set(TorchClientKey(set.first), set.second, deadline));
    }
    // The store answers a connection's queries in order: this reply means
    // every Set before it was applied.
    DDP_RETURN_IF_ERROR(
        client->Peek(TorchClientKey(unconfirmed->back().first), deadline)
            .status());
    unconfirmed->clear();
  }
  for (const std::string& key : watched) {
    StatusOr<std::optional<std::string>> value = client->Peek(
        TorchClientKey(key), Clock::now() + options_.query_timeout);
    DDP_RETURN_IF_ERROR(value.status());
    MutexLock lock(&mu_);
    if (epoch_ != round) return CancelledError("a new round");
    if (value->has_value()) {
      values_[key] = std::move(**value);
    } else {
      values_.erase(key);
    }
  }
  return Status::Ok();
}

}  // namespace ddprun::agent
