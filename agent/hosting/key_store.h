#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The keys and values of the agent store (torch's TCPStore semantics), with
// a cap on their total size, and the WAITs parked on keys that do not
// exist yet. No wire format (store_protocol.h) and no sockets.
//
// Size: each key counts its key and value bytes plus kPerKeyOverhead; a
// change that would take the total over `max_total_bytes`, or a value over
// `max_value_bytes` (an APPEND that grows one past it), is refused with
// RESOURCE_EXHAUSTED. A refused call changes nothing. After std::bad_alloc
// (from any call) the size accounting and the wait index still agree with
// the contents; a MULTI_SET may then have set a prefix of its pairs.
//
// Waits: a waiter (an id the caller chooses, one wait each) parks on the
// keys of a WAIT that are missing; when the last of them is set,
// `on_wait_done(id)` runs, synchronously, inside the call that set it,
// after the wait is forgotten (it may park a new one).
//
// Threading: not thread-safe; the caller serialises every call (the agent
// store holds one mutex around it).
class KeyStore {
 public:
  using Value = std::shared_ptr<const std::string>;
  using WaiterId = uint64_t;
  static constexpr size_t kPerKeyOverhead = 64;

  struct Limits {
    size_t max_value_bytes = size_t{256} << 20;
    size_t max_total_bytes = size_t{1} << 30;
  };

  KeyStore(Limits limits, std::function<void(WaiterId)> on_wait_done);
  KeyStore(const KeyStore&) = delete;
  KeyStore& operator=(const KeyStore&) = delete;

  // Null when `key` is missing.
  Value Get(const std::string& key) const;
  bool Contains(const std::string& key) const;
  Status Set(const std::string& key, std::string value);
  // All or nothing: either every pair is set, in order, or none.
  Status MultiSet(std::vector<std::string> keys,
                  std::vector<std::string> values);
  // torch's compare_set: a missing key with an empty `expected` is set to
  // `desired`; a present key equal to `expected` is swapped. Returns the
  // value the client is answered (the current one, or `expected` for a
  // missing key that was not set).
  StatusOr<Value> CompareSet(const std::string& key,
                             const std::string& expected, std::string desired);
  // Adds to the decimal integer stored at `key` (missing: 0) with
  // wrap-around, stores and returns the sum. FAILED_PRECONDITION when the
  // value is not a decimal int64.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Appends to the value (missing: empty).
  Status Append(const std::string& key, const std::string& tail);
  bool Delete(const std::string& key);

  // True when every key exists; else parks `waiter` on the missing ones
  // (replacing its earlier wait, if any).
  bool Wait(WaiterId waiter, const std::vector<std::string>& keys);
  // Forgets the wait of `waiter`, if any; on_wait_done does not run.
  void CancelWait(WaiterId waiter);
  bool Waiting(WaiterId waiter) const { return waits_.count(waiter) > 0; }

  // Drops every key and every wait (no on_wait_done); returns how many keys.
  size_t Clear();

  size_t num_keys() const { return keys_.size(); }
  size_t total_bytes() const { return total_bytes_; }
  const Limits& limits() const { return limits_; }

  // For tests and the fuzz target: every key and value, in key order.
  void ForEach(const std::function<void(const std::string&,
                                        const std::string&)>& fn) const;
  // For tests and the fuzz target: "" when the size accounting, the limits
  // and the wait index agree with the contents; else what does not.
  std::string CheckInvariants() const;

 private:
  static size_t Cost(const std::string& key, size_t value_bytes) {
    return key.size() + value_bytes + kPerKeyOverhead;
  }
  // OK when `key` may hold `value_bytes` (replacing what it holds).
  Status Admit(const std::string& key, size_t value_bytes,
               const char* op) const;
  // Stores `value` at `key` (admitted before) and wakes its waiters.
  void Put(const std::string& key, std::shared_ptr<std::string> value);
  void Wake(const std::string& key);

  const Limits limits_;
  const std::function<void(WaiterId)> on_wait_done_;
  // Values are shared with the replies that carry them (ReplyQueue); one
  // held only here may be changed in place.
  std::map<std::string, std::shared_ptr<std::string>> keys_;
  size_t total_bytes_ = 0;
  std::map<WaiterId, std::set<std::string>> waits_;    // missing keys
  std::map<std::string, std::set<WaiterId>> waiters_;  // by key
};

}  // namespace ddprun::agent
