#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::rendezvous {

// Identifies a parked call (a Join long poll, an exit barrier, a failure
// report) so that its answer can be delivered later. Chosen by the caller;
// 0 means "none".
using WaiterId = uint64_t;

// A job's restart budget (--max_restarts, job-global) and its decision on
// each worker failure. A worker failure is often the first sign of a node
// loss (the peers' collectives break before heartbeats can tell), and a
// node loss must never spend the budget, so the decision stays open until
// `decide_at` (the job uses heartbeat_timeout + 0.5 s):
// - with room, one unit is spent at once (the reporter restarts now) and
//   refunded if a node of that round is lost before the decision;
// - without room, the reports wait for the decision: a node loss means a
//   restart after all, the deadline the job's failure.
// The job asks what to do; this class keeps the count and the open
// decision. Plain C++, not thread-safe.
class RestartBudget {
 public:
  // The open decision about one worker failure.
  struct Pending {
    int64_t round = 0;  // the round the failure ended
    Clock::TimePoint decide_at;
    bool charged = false;  // one unit is spent already (refundable)
    std::string reason;    // the failure, for the job's failure message
    // Reports waiting for the decision (a budget without room), and their
    // nodes.
    std::vector<WaiterId> waiters;
    std::vector<std::string> waiting_nodes;
    // The reporter's host and when it reported (the bad-host charge that a
    // node loss undoes).
    std::string host;
    Clock::TimePoint reported_at;
    // Nodes of the failed round left out of the next round before their
    // heartbeats expired, with when they were last seen: one that goes
    // silent for heartbeat_timeout before `decide_at` was lost.
    std::map<std::string, Clock::TimePoint> missing;
  };

  explicit RestartBudget(int max_restarts) : max_(max_restarts) {}

  // Restarts spent so far (TORCHELASTIC_RESTART_COUNT).
  int used() const { return used_; }
  int max() const { return max_; }
  // Restart scope "failed": spends one unit now, for a rank replaced
  // while its round goes on (no decision is opened: a replacement is not a
  // node loss). False when none is left.
  bool CanSpend() const { return used_ < max_; }
  bool TrySpend() {
    if (used_ >= max_) return false;
    ++used_;
    return true;
  }
  // A job rebuilt after a server restart continues from the count its
  // agents report.
  void Adopt(int used) { used_ = used; }
  void RaiseTo(int used) { used_ = std::max(used_, used); }

  // Opens the decision about a worker failure that ended `round` (it
  // replaces an open one): spends one unit now when there is room.
  Pending& Open(int64_t round, std::string reason, Clock::TimePoint decide_at);
  // The open decision; null when none.
  Pending* pending() { return pending_ ? &*pending_ : nullptr; }
  const Pending* pending() const { return pending_ ? &*pending_ : nullptr; }
  // True while a failure without room waits for its decision: no new round
  // may form before it is settled.
  bool Blocking() const { return pending_ && !pending_->charged; }

  // A node of `round` was lost: the failure was that loss. Refunds the unit
  // the failure spent and closes the decision (its waiters restart).
  // nullopt when no decision about `round` is open.
  std::optional<Pending> Refund(int64_t round);
  // Closes the open decision and returns it: the charge stands, or the job
  // failed (its waiters get no restart).
  std::optional<Pending> Take();

  // The job's failure reason once `failure` found no budget left.
  std::string Exhausted(const std::string& failure) const;

 private:
  const int max_;
  int used_ = 0;
  std::optional<Pending> pending_;
};

}  // namespace ddprun::rendezvous
