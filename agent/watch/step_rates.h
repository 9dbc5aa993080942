#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ddprun::agent {

// Straggler detection from the workers' step counts (DDPRUN_STEP_FILE,
// written by `import ddprun_steps; ddprun_steps.step()` or a C++ worker's
// ddprun::worker::Heartbeat()). Plain logic: the caller feeds counts with
// the time it read them (an injected clock in tests).
//
// A rank's rate is its steps per second over the last `window` (at least
// two counts `min_span` apart; unknown before). A rank is slow when its
// rate times `factor` is below the median rate of the ranks compared (the
// job's median when the rendezvous gives one, else this node's); a rank
// slow for `slow_for` without a break is a straggler, reported once until
// it catches up.
struct StragglerPolicy {
  double factor = 2.0;  // 0 = off
  Clock::Duration slow_for = std::chrono::seconds(30);
  Clock::Duration window = std::chrono::seconds(10);
  Clock::Duration min_span = std::chrono::seconds(2);
};

struct RankRate {
  int rank = 0;
  int64_t steps = 0;       // the last count read
  double per_s = -1;       // steps per second; < 0 = not known yet
};

struct Straggler {
  int rank = 0;
  double per_s = 0;
  double median_per_s = 0;
  Clock::Duration slow_for{};
};

class StepRates {
 public:
  explicit StepRates(StragglerPolicy policy) : policy_(policy) {}

  // Rank `rank` had done `steps` steps at `now`. A count lower than the
  // last (a restarted worker) starts the rank afresh.
  void Observe(int rank, int64_t steps, Clock::TimePoint now);
  // Forgets every rank (a new worker group).
  void Clear() { ranks_.clear(); }

  // Every rank observed, sorted by rank.
  std::vector<RankRate> Rates() const;
  // The median of the known rates (< 0 when none is known).
  static double Median(const std::vector<RankRate>& rates);

  // The ranks that became stragglers at `now` against `median_per_s`
  // (pass < 0 for this node's own median): each is returned once, again
  // only after it caught up. Call after each round of Observe().
  std::vector<Straggler> Check(Clock::TimePoint now, double median_per_s);
  // True while `rank` is a reported straggler (until it catches up).
  bool Straggling(int rank) const;

 private:
  struct Rank {
    std::deque<std::pair<Clock::TimePoint, int64_t>> samples;
    bool slow = false;
    Clock::TimePoint slow_since{};
    bool reported = false;
  };
  double RateOf(const Rank& r) const;

  StragglerPolicy policy_;
  std::map<int, Rank> ranks_;
};

// "rank 3 runs at 1.2 steps/s, 0.4x the job's median 3.0 steps/s, for 31 s"
std::string DescribeStraggler(const Straggler& s, bool job_median);

}  // namespace ddprun::agent
