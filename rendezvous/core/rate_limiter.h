#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include "common/clock.h"

namespace ddprun::rendezvous {

// Token buckets keyed by a string (one per node): each key may make `burst`
// calls at once and `rate_per_s` calls per second sustained. Keeps at most
// `max_keys` buckets; full (idle) buckets are dropped first, and a new key
// is refused while every slot holds a busy bucket, so a flood of fresh keys
// cannot grow memory.
//
// Threading: not thread-safe; the owner serialises calls.
class RateLimiter {
 public:
  // rate_per_s <= 0 disables the limiter (Allow always true). `clock` must
  // outlive this object.
  RateLimiter(Clock* clock, double rate_per_s, double burst,
              size_t max_keys = 100000);

  // True and one token spent, or false (no token left) and nothing changed.
  bool Allow(const std::string& key);

  size_t key_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    Clock::TimePoint at;
  };
  double Refill(const Bucket& bucket, Clock::TimePoint now) const;
  void DropFullBuckets(Clock::TimePoint now);

  Clock* const clock_;
  const double rate_per_s_;
  const double burst_;
  const size_t max_keys_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace ddprun::rendezvous
