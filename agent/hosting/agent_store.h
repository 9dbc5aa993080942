#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ddprun/common/status_or.h"
#include "common/thread_annotations.h"

namespace ddprun::agent {

// The c10d TCPStore the workers of a static multi-node job share, served by
// node 0's agent on --master_port beside the gRPC rendezvous (torchrun's
// "agent store": workers get TORCHELASTIC_USE_AGENT_STORE=True and connect
// to MASTER_ADDR:MASTER_PORT as TCPStore clients under the prefix
// "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>").
//
// One listening socket, two protocols: a connection whose first bytes are
// HTTP/2's client preface ("PRI ") is handed to `on_http2` (the rendezvous
// server adopts it); any other connection is a TCPStore client. Both wire
// dialects of torch's TCPStore are served, told apart by the first query:
// - torch >= 2.2: the connection opens with VALIDATE (type 0) and the
//   magic 0x3C85F7CE; types VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK,
//   WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET,
//   CANCEL_WAIT, PING = 0..13;
// - torch 1.13 / 2.0: no handshake; SET, COMPARE_SET, GET, ADD, CHECK,
//   WAIT, GETNUMKEYS, WATCH_KEY, DELETE_KEY, APPEND, MULTI_GET, MULTI_SET,
//   CANCEL_WAIT = 0..12.
// Framing (both): one type byte, then its arguments; strings and byte
// vectors are a little-endian uint64 length and the bytes; counts are
// uint64, ADD's delta and integer replies int64, PING's nonce uint32;
// CHECK answers one byte (0 ready, 1 not ready), WAIT one byte when every
// key exists (0), CANCEL_WAIT one byte (1).
// Not served (the connection is closed with a logged reason): torch 2.1's
// per-query magic prefix, WATCH_KEY, the QUEUE_* and LIST_KEYS queries of
// torch >= 2.8, TLS, a key over 1 MiB, a value over `max_value_bytes`, a
// count over 1M, an ADD to a non-integer value, GET of a missing key (torch
// waits for a key before it gets it). A bad message never stops the server.
//
// Restarts: Reset() drops every key and closes every store connection (their
// pending waits fail) when a new rendezvous round forms, before any worker
// of that round starts: the previous round's keys (its Gloo addresses, its
// barrier counters) cannot mislead the next round, even when the restart
// count, and so the workers' key prefix, stays the same (a membership
// change), and bytes a dying worker sent late cannot land in the new round.
//
// Threading: thread-safe; one thread of its own serves every connection
// (poll(2)); `on_http2` runs on it.
class AgentStore {
 public:
  struct Options {
    // Called with each connection that speaks HTTP/2; takes the descriptor.
    std::function<void(int fd)> on_http2;
    // A WAIT still pending after this long closes its connection (clients
    // normally time out first and cancel).
    std::chrono::milliseconds max_wait = std::chrono::hours(6);
    // A connection that sent "P" but not yet the rest of "PRI " after this
    // long is closed.
    std::chrono::milliseconds sniff_timeout = std::chrono::seconds(10);
    size_t max_value_bytes = size_t{256} << 20;
  };

  explicit AgentStore(Options options);
  ~AgentStore();  // Stop()
  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;

  // Listens on host:port (port 0: any free port) and starts serving; returns
  // the bound port. UNAVAILABLE when the port is taken; FAILED_PRECONDITION
  // when started before.
  StatusOr<int> Start(const std::string& host, int port) EXCLUDES(mu_);

  // Drops every key and closes every TCPStore connection (`why` goes into
  // one log line). Connections not yet identified are closed if they turn
  // out to be TCPStore clients. Returns at once; nothing of the dropped
  // state is served after it returns.
  void Reset(const std::string& why) EXCLUDES(mu_);

  // Stops listening and closes every connection. Idempotent.
  void Stop() EXCLUDES(mu_);

  int port() const EXCLUDES(mu_);
  size_t num_keys() const EXCLUDES(mu_);

 private:
  enum class Kind { kUnknown, kStore };
  enum class Dialect { kUnknown, kLegacy, kModern };
  struct Conn {
    int fd = -1;
    std::string peer;
    Kind kind = Kind::kUnknown;
    Dialect dialect = Dialect::kUnknown;
    std::string in;
    std::string out;
    bool dead = false;   // closed by Reset/Stop or an error; reaped by Loop
    bool stale = false;  // accepted before the last Reset, kind unknown then
    std::chrono::steady_clock::time_point since;  // accepted
    // A pending WAIT: keys still missing and its deadline.
    std::set<std::string> waiting;
    std::chrono::steady_clock::time_point wait_deadline;
  };
  enum class Parsed { kNeedMore, kDone, kBad };

  void Loop() EXCLUDES(mu_);
  void AcceptAll() REQUIRES(mu_);
  // Reads what `c` has; true to keep it.
  bool Serve(Conn* c, std::vector<int>* handoff) REQUIRES(mu_);
  bool Sniff(Conn* c, std::vector<int>* handoff) REQUIRES(mu_);
  Parsed ParseOne(Conn* c, std::string* error) REQUIRES(mu_);
  bool Flush(Conn* c) REQUIRES(mu_);
  void Set(const std::string& key, std::string value) REQUIRES(mu_);
  void Wake(const std::string& key) REQUIRES(mu_);
  void Close(Conn* c, const std::string& reason) REQUIRES(mu_);
  void Notify();

  const Options options_;
  mutable Mutex mu_;
  int listen_fd_ GUARDED_BY(mu_) = -1;
  int port_ GUARDED_BY(mu_) = 0;
  int wake_[2] = {-1, -1};
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t next_id_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_ GUARDED_BY(mu_);
  std::map<std::string, std::string> keys_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ddprun::agent
