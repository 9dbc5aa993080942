#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

#include "agent/hosting/key_store.h"
#include "agent/hosting/reply_queue.h"
#include "agent/hosting/store_protocol.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// One TCPStore client of the agent store, without its socket: the bytes it
// sent go in (Append), its queries run against a KeyStore (Run), and what
// it is owed comes out (replies()). The agent store feeds it from a
// socket; the agent_store fuzz target feeds it bytes directly.
//
// Bounds, per session: input held is at most one query not yet whole plus
// what the caller appended while WantsInput() was true; unsent replies at
// most reply_high_water + max_reply_bytes (+1 byte of a finished WAIT),
// because no query runs while more than reply_high_water are unsent and
// no single reply may exceed max_reply_bytes (a MULTI_GET asking for more
// is an error); one Run() does at most max_queries_per_run queries or
// max_input_per_run input bytes (plus the query that crosses it), so the
// caller's lock around it is held for bounded work.
//
// Errors (the connection is to be closed; the message is the reason):
// what StoreDecoder refuses, what KeyStore refuses (size limits, ADD to a
// non-integer), GET or MULTI_GET of a missing key (torch waits for a key
// before getting it), VALIDATE with a wrong magic, an oversized reply.
// After an error the session must not be run again.
//
// Threading: not thread-safe. Run() and WaitDone() need the KeyStore's
// lock (the caller's); the rest is the session's own.
class StoreSession {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Options {
    StoreWireLimits wire;
    // 0: wire.max_value_bytes + 64 (a GET of the largest value).
    size_t max_reply_bytes = 0;
    size_t reply_high_water = size_t{1} << 20;
    size_t max_queries_per_run = 65536;
    size_t max_input_per_run = size_t{1} << 20;
    // How long a WAIT may stay parked (wait_deadline()).
    std::chrono::milliseconds max_wait = std::chrono::hours(6);
    // For tests and the fuzz target: every query run and its outcome.
    std::function<void(const StoreRequest&, const Status&)> on_query;
  };

  // `id`: its waiter id in the KeyStore. `options` must outlive it.
  StoreSession(KeyStore::WaiterId id, const Options* options);

  void Append(const char* data, size_t n) { decoder_.Append(data, n); }
  // True when the caller should read more bytes for it: no whole query is
  // buffered and replies are under the high-water mark.
  bool WantsInput();

  enum class Progress {
    kNeedInput,  // every whole query ran
    kMore,       // the per-run budget is spent: run again soon
    kReplyFull,  // run again once replies are under the high-water mark
  };
  StatusOr<Progress> Run(KeyStore* store, TimePoint now);

  // The KeyStore's on_wait_done for this session: queues STOP_WAITING.
  void WaitDone();

  // When a parked WAIT outlives Options::max_wait; TimePoint::max() when
  // none is parked.
  TimePoint wait_deadline() const { return wait_deadline_; }
  // True once a whole query ran: a TCPStore client, not a stray socket.
  bool identified() const { return identified_; }
  StoreDialect dialect() const { return decoder_.dialect(); }
  size_t buffered_input() const { return decoder_.buffered(); }
  size_t max_reply_bytes() const { return max_reply_; }
  ReplyQueue* replies() { return &replies_; }
  KeyStore::WaiterId id() const { return id_; }

 private:
  Status Execute(StoreRequest& request, KeyStore* store, TimePoint now);
  Status MultiGet(const StoreRequest& request, KeyStore* store);

  const KeyStore::WaiterId id_;
  const Options* const options_;
  const size_t max_reply_;
  StoreDecoder decoder_;
  ReplyQueue replies_;
  bool identified_ = false;
  TimePoint wait_deadline_ = TimePoint::max();
};

}  // namespace ddprun::agent
