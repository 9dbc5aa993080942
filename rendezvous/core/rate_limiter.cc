#include "rendezvous/core/rate_limiter.h"

#include <algorithm>

namespace ddprun::rendezvous {

RateLimiter::RateLimiter(Clock* clock, double rate_per_s, double burst,
                         size_t max_keys)
    : clock_(clock),
      rate_per_s_(rate_per_s),
      burst_(std::max(1.0, burst)),
      max_keys_(std::max<size_t>(1, max_keys)) {}

double RateLimiter::Refill(const Bucket& bucket, Clock::TimePoint now) const {
  const double elapsed = std::chrono::duration<double>(now - bucket.at).count();
  return std::min(burst_, bucket.tokens + elapsed * rate_per_s_);
}

void RateLimiter::DropFullBuckets(Clock::TimePoint now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    it = Refill(it->second, now) >= burst_ ? buckets_.erase(it) : std::next(it);
  }
}

bool RateLimiter::Allow(const std::string& key) {
  if (rate_per_s_ <= 0) return true;
  const Clock::TimePoint now = clock_->Now();
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) DropFullBuckets(now);
    if (buckets_.size() >= max_keys_) return false;
    buckets_.emplace(key, Bucket{burst_ - 1, now});
    return true;
  }
  const double tokens = Refill(it->second, now);
  if (tokens < 1) return false;
  it->second = Bucket{tokens - 1, now};
  return true;
}

}  // namespace ddprun::rendezvous
