#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// A blocking client of one c10d TCPStore, for the agent's own keys on a
// store another process serves (the workers' store of another node under
// --restart_scope failed): SET, a read that never waits for a missing
// key, ADD. It speaks torch 1.13's dialect (store_protocol.h: no VALIDATE
// first), which AgentStore and torch 1.13's server read; torch >= 2.2's
// server wants the handshake and is not served.
// Keys go on the wire as given: TorchClientKey() names a key as a worker's
// client would.
//
// Nothing blocks past its deadline: the socket is non-blocking and every
// wait is a poll(2) bounded by the call's deadline, name resolution
// included (a host name is resolved on a thread of its own; one that
// outlives the deadline is left to finish alone). A readable `cancel_fd`
// ends any call at once with CANCELLED: the owner's thread can be
// interrupted from another (a new address, a shutdown). The client never
// reads it; its owner drains it.
//
// Errors (Status, no exceptions): UNAVAILABLE (a host that does not
// resolve, cannot connect, not connected, the connection was lost or
// closed by the store); DEADLINE_EXCEEDED; CANCELLED; INVALID_ARGUMENT (a
// reply whose length is over max_reply_bytes). After any error the
// connection is closed, since a late reply would be read as the next
// query's: Connect again.
//
// Threading: not thread-safe; one thread uses it.
class StoreClient {
 public:
  using Clock = std::chrono::steady_clock;

  // `cancel_fd`: -1 (none) or a descriptor that outlives this client.
  explicit StoreClient(int cancel_fd = -1);
  ~StoreClient();  // Close()
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Closes any connection, then connects to the first of `host`'s
  // addresses that accepts (a name or a numeric IPv4/IPv6 address).
  Status Connect(const std::string& host, int port, Clock::time_point deadline);
  void Close();
  bool connected() const { return fd_ >= 0; }

  // SET has no reply: OK means sent whole, not applied. The reply to a
  // later query on this connection says it was (the store answers one
  // connection's queries in order).
  Status Set(const std::string& key, const std::string& value,
             Clock::time_point deadline);
  // The key's value, nullopt when missing: COMPARE_SET(key, x, x), which
  // for a missing key answers x without setting it (torch's semantics), x
  // being ddprun_elastic.py's "\0ddprun-absent". A key that holds x reads
  // as missing.
  StatusOr<std::optional<std::string>> Peek(const std::string& key,
                                            Clock::time_point deadline);
  // ADD: the key's value after adding `delta` (a missing key counts as 0).
  StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                        Clock::time_point deadline);

  // The longest value a reply may carry (AgentStore's default value
  // limit).
  void set_max_reply_bytes(size_t n) { max_reply_bytes_ = n; }

 private:
  // Waits until the socket is ready for `events` (POLLIN, POLLOUT).
  Status WaitReady(short events, Clock::time_point deadline) const;
  // Moves `n` bytes through `io` (a send or a recv of the bytes from `at`
  // on), waiting for `events` while the socket is not ready.
  Status Transfer(size_t n, short events, Clock::time_point deadline,
                  const std::function<ssize_t(size_t at)>& io);
  Status SendAll(const std::string& bytes, Clock::time_point deadline);
  Status RecvExact(char* data, size_t n, Clock::time_point deadline);
  StatusOr<std::string> RecvBytes(Clock::time_point deadline);
  // Closes the connection and returns `error`.
  Status Fail(Status error);

  const int cancel_fd_;
  int fd_ = -1;
  std::string peer_;  // "host:port", for messages
  size_t max_reply_bytes_ = size_t{256} << 20;
};

}  // namespace ddprun::agent
