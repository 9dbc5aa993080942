#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::rendezvous {

// The bad-host policy of one job (Horovod's blacklist): a host whose
// workers failed `failures` times within `window` is kept out of rounds
// for `cooldown`. Hosts are NodeInfo.addr, not node ids: a restarted agent
// on the same machine gets a new node id but is the same host. Only the
// bookkeeping lives here; the job decides what an exclusion means for its
// nodes (rendezvous_job.h).
//
// Plain C++, no clock of its own (callers pass `now`), not thread-safe.
class BadHostPolicy {
 public:
  // `failures` 0 turns the policy off. `job_id` names the job in log lines.
  BadHostPolicy(std::string job_id, uint32_t failures, Clock::Duration window,
                Clock::Duration cooldown);

  // A worker failure of `host` at `now`. True when it excludes the host
  // (until now + cooldown; one WARNING line; its failure count starts again
  // from zero). Always false while the policy is off.
  bool RecordFailure(const std::string& host, Clock::TimePoint now);
  // Undoes RecordFailure(host, at): the failure turned out to be a node
  // loss. True when that lifts the exclusion it caused.
  bool ForgetFailure(const std::string& host, Clock::TimePoint at);

  bool Excluded(const std::string& host, Clock::TimePoint now) const;
  // True while `host` has failures in the window or an exclusion.
  bool Tracks(const std::string& host) const { return hosts_.count(host); }
  bool empty() const { return hosts_.empty(); }

  // Ends the cool-downs that are over at `now` (one INFO line each) and
  // forgets failures older than the window.
  void Expire(Clock::TimePoint now);
  // The earliest end of a cool-down; nullopt if none.
  std::optional<Clock::TimePoint> NextDeadline() const;

 private:
  struct HostRecord {
    std::vector<Clock::TimePoint> failures;  // within the window, oldest first
    std::optional<Clock::TimePoint> excluded_until;
  };
  void DropOld(HostRecord* record, Clock::TimePoint now) const;

  const std::string job_id_;
  const uint32_t limit_;
  const Clock::Duration window_;
  const Clock::Duration cooldown_;
  std::map<std::string, HostRecord> hosts_;
};

}  // namespace ddprun::rendezvous
