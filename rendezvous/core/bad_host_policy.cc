#include "rendezvous/core/bad_host_policy.h"

#include <algorithm>

#include "common/logging.h"

namespace ddprun::rendezvous {

BadHostPolicy::BadHostPolicy(std::string job_id, uint32_t failures,
                             Clock::Duration window, Clock::Duration cooldown)
    : job_id_(std::move(job_id)),
      limit_(failures),
      window_(window),
      cooldown_(cooldown) {}

void BadHostPolicy::DropOld(HostRecord* record, Clock::TimePoint now) const {
  auto& f = record->failures;
  f.erase(f.begin(), std::find_if(f.begin(), f.end(),
                                  [&](auto t) { return now - t < window_; }));
}

bool BadHostPolicy::RecordFailure(const std::string& host,
                                  Clock::TimePoint now) {
  if (limit_ == 0) return false;
  HostRecord& record = hosts_[host];
  DropOld(&record, now);
  record.failures.push_back(now);
  if (record.failures.size() < limit_) return false;
  record.excluded_until = now + cooldown_;
  record.failures.clear();  // the cool-down pays for these failures
  DDP_LOG(WARNING) << "rendezvous '" << job_id_ << "': host " << host
                   << " excluded for "
                   << std::chrono::duration<double>(cooldown_).count()
                   << " s: " << limit_ << " worker failures within "
                   << std::chrono::duration<double>(window_).count() << " s";
  return true;
}

bool BadHostPolicy::ForgetFailure(const std::string& host,
                                  Clock::TimePoint at) {
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return false;
  HostRecord& record = it->second;
  auto& f = record.failures;
  if (auto pos = std::find(f.begin(), f.end(), at); pos != f.end()) {
    f.erase(pos);
    return false;
  }
  if (record.excluded_until && *record.excluded_until == at + cooldown_) {
    // This very failure excluded the host: lift the exclusion.
    record.excluded_until.reset();
    return true;
  }
  return false;
}

bool BadHostPolicy::Excluded(const std::string& host,
                             Clock::TimePoint now) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && it->second.excluded_until &&
         now < *it->second.excluded_until;
}

void BadHostPolicy::Expire(Clock::TimePoint now) {
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    HostRecord& r = it->second;
    if (r.excluded_until && now >= *r.excluded_until) {
      DDP_LOG(INFO) << "rendezvous '" << job_id_ << "': host " << it->first
                    << " cool-down over; its nodes may join again";
      r.excluded_until.reset();
    }
    DropOld(&r, now);
    it = (!r.excluded_until && r.failures.empty()) ? hosts_.erase(it)
                                                   : std::next(it);
  }
}

std::optional<Clock::TimePoint> BadHostPolicy::NextDeadline() const {
  std::optional<Clock::TimePoint> next;
  for (const auto& [host, record] : hosts_) {
    if (record.excluded_until && (!next || *record.excluded_until < *next)) {
      next = record.excluded_until;
    }
  }
  return next;
}

}  // namespace ddprun::rendezvous
