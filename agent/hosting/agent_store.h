#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/hosting/connection_quota.h"
#include "agent/hosting/key_store.h"
#include "agent/hosting/store_connection.h"
#include "agent/hosting/store_session.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The c10d TCPStore the workers of a static multi-node job share, served by
// node 0's agent on --master_port beside the gRPC rendezvous (torchrun's
// "agent store": workers get TORCHELASTIC_USE_AGENT_STORE=True and connect
// to MASTER_ADDR:MASTER_PORT as TCPStore clients under the prefix
// "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>").
//
// One listening socket, two protocols: a connection whose first bytes are
// HTTP/2's client preface ("PRI ") is handed to `on_http2` (the rendezvous
// server adopts it); any other is a TCPStore client of either wire dialect
// (store_protocol.h: torch 1.13 through 2.x). The pieces: the wire format
// (store_protocol.h), one client's queries and replies (store_session.h),
// the keys (key_store.h), which connections are kept (connection_quota.h);
// this class is the sockets and the loop.
//
// Not served (the connection is closed with a logged reason): torch 2.1's
// per-query magic prefix, WATCH_KEY, the QUEUE_* and LIST_KEYS queries of
// torch >= 2.8, TLS, GET of a missing key (torch waits for a key before it
// gets it), anything over the limits below. A bad message or a bad client
// never stops the server and never affects another connection.
//
// Hostile clients (no authentication, as torch's TCPStore; the README says
// how to keep the port on a trusted network). Bounded, whatever a client
// sends: the store's size (KeyStore::Limits), each connection's buffers
// (StoreSession: one query plus a read, replies up to a high-water mark plus
// one reply; a connection over it is not read until its client reads),
// the number of connections (ConnectionQuota: a connection must send a
// whole first query within `first_message_timeout`, except torch 1.13's
// silent watch socket; per host and in total), the work done per poll
// round (for one connection StoreSession's per-run budget and 256 KiB
// read, others being served in between; 256 accepts). Nothing a client
// sends throws out of the store thread: an allocation failure closes that
// client's connection; a failing poll(2) is logged and retried, the thread
// serves on until Stop().
//
// Restarts: Reset() drops every key and closes every store connection
// (their pending waits fail) when a new rendezvous round forms, before any
// worker of that round starts: the previous round's keys (its Gloo
// addresses, its barrier counters) cannot mislead the next round, even when
// the restart count, and so the workers' key prefix, stays the same (a
// membership change), and bytes a dying worker sent late cannot land in the
// new round.
//
// Threading: thread-safe. One thread of its own serves every connection
// (poll(2)); `on_http2` runs on it. The keys are behind one mutex, which
// the thread holds for one connection's bounded run at a time, never
// across socket I/O.
class AgentStore {
 public:
  struct Options {
    // Called with each connection that speaks HTTP/2; takes the descriptor.
    std::function<void(int fd)> on_http2;
    // A WAIT still pending after this long closes its connection (clients
    // normally time out first and cancel).
    std::chrono::milliseconds max_wait = std::chrono::hours(6);
    // A connection that has not sent a whole first message (or, starting
    // like HTTP/2, all of "PRI ") this long after it connected is closed.
    std::chrono::milliseconds first_message_timeout = std::chrono::seconds(10);
    size_t max_value_bytes = size_t{256} << 20;
    // Keys and values together (KeyStore::Limits::max_total_bytes).
    size_t max_store_bytes = size_t{1} << 30;
    // Connections kept (ConnectionQuota::Limits); 0 for max_connections:
    // half of the process's open-file limit, at least 64.
    size_t max_connections = 0;
    size_t max_connections_per_host = 256;
    size_t max_unidentified = 64;
  };

  explicit AgentStore(Options options);
  ~AgentStore();  // Stop()
  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;

  // Listens on host:port (port 0: any free port) and starts serving; returns
  // the bound port. UNAVAILABLE when the port is taken; FAILED_PRECONDITION
  // when started before.
  StatusOr<int> Start(const std::string& host, int port) EXCLUDES(start_mu_);

  // Drops every key and closes every TCPStore connection (`why` goes into
  // one log line). Connections not yet identified are closed if they turn
  // out to be TCPStore clients. Returns quickly: it waits at most for the
  // one bounded run in progress, never for another connection's backlog;
  // nothing of the dropped state is served after it returns. Safe after
  // Stop().
  void Reset(const std::string& why) EXCLUDES(mu_);

  // The agent's own writes (restart scope "failed": the generation keys,
  // docs/restart_scope.md), keys as they are on the wire (torch's client
  // sends "/" + its key). Set may
  // be called from any thread and returns at once: the store's thread
  // applies the sets in call order at its next turn (microseconds), as a
  // client's SET, waking the clients that wait for the key. A Reset()
  // drops sets not applied yet. Get never waits: nullopt when missing.
  void Set(const std::string& key, std::string value) EXCLUDES(mu_);
  std::optional<std::string> Get(const std::string& key) const EXCLUDES(mu_);

  // Stops listening and closes every connection. Idempotent.
  void Stop() EXCLUDES(start_mu_, mu_);

  int port() const { return port_.load(); }
  size_t num_keys() const EXCLUDES(mu_);

 private:
  // Warnings a flood of connections causes: at most 20 lines per 10 s; the
  // next line after a window says how many were not shown.
  struct LogThrottle {
    bool Allow() EXCLUDES(mu);
    Mutex mu;
    std::chrono::steady_clock::time_point window GUARDED_BY(mu){};
    int lines GUARDED_BY(mu) = 0;
    int64_t suppressed GUARDED_BY(mu) = 0;
  };

  void Loop();
  // One poll round: deadlines, poll(2), accepting, serving each connection.
  void Turn();
  void AcceptAll();
  void Serve(StoreConnection* c, short revents,
             std::chrono::steady_clock::time_point now);
  // Runs its queries under mu_ (one bounded run).
  void RunSession(StoreConnection* c, std::chrono::steady_clock::time_point now)
      EXCLUDES(mu_);
  // Marks it for Reap(); logs `reason` unless empty (the peer went away).
  void Close(StoreConnection* c, const std::string& reason);
  // Forgets closed connections (their waits, their descriptors) and hands
  // HTTP/2 ones to on_http2.
  void Reap() EXCLUDES(mu_);
  void Notify() EXCLUDES(wake_mu_);

  const Options options_;
  StoreSession::Options session_options_;
  LogThrottle throttle_;

  // Start/Stop.
  Mutex start_mu_;
  std::thread thread_ GUARDED_BY(start_mu_);
  bool started_ GUARDED_BY(start_mu_) = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> port_{0};

  // The wake pipe: Notify() may run after Stop() closed it.
  Mutex wake_mu_;
  int wake_[2] GUARDED_BY(wake_mu_) = {-1, -1};
  int wake_read_ = -1;  // the loop thread's copy of wake_[0]

  // The keys, and what Reset() needs to close every store connection from
  // another thread.
  mutable Mutex mu_;
  KeyStore store_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // Resets so far
  // Descriptors of identified TCPStore connections, by connection id.
  std::map<uint64_t, int> store_fds_ GUARDED_BY(mu_);
  // Set()'s keys until the loop applies them.
  std::vector<std::pair<std::string, std::string>> own_sets_ GUARDED_BY(mu_);

  // The loop thread's own (Stop() reads them after joining it).
  int listen_fd_ = -1;
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::unique_ptr<StoreConnection>> conns_;
  std::unique_ptr<ConnectionQuota> quota_;
};

}  // namespace ddprun::agent
