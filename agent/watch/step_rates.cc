#include "agent/watch/step_rates.h"

#include <algorithm>
#include <cstdio>

namespace ddprun::agent {

void StepRates::Observe(int rank, int64_t steps, Clock::TimePoint now) {
  Rank& r = ranks_[rank];
  if (!r.samples.empty() && steps < r.samples.back().second) r = Rank{};
  r.samples.emplace_back(now, steps);
  // Keep the newest sample at or before the window's start, and the rest.
  while (r.samples.size() > 2 && r.samples[1].first <= now - policy_.window) {
    r.samples.pop_front();
  }
}

double StepRates::RateOf(const Rank& r) const {
  if (r.samples.size() < 2) return -1;
  const auto& [t0, s0] = r.samples.front();
  const auto& [t1, s1] = r.samples.back();
  if (t1 - t0 < policy_.min_span) return -1;
  return static_cast<double>(s1 - s0) /
         std::chrono::duration<double>(t1 - t0).count();
}

std::vector<RankRate> StepRates::Rates() const {
  std::vector<RankRate> out;
  for (const auto& [rank, r] : ranks_) {
    out.push_back({rank, r.samples.empty() ? 0 : r.samples.back().second,
                   RateOf(r)});
  }
  return out;
}

double StepRates::Median(const std::vector<RankRate>& rates) {
  std::vector<double> known;
  for (const RankRate& r : rates) {
    if (r.per_s >= 0) known.push_back(r.per_s);
  }
  if (known.empty()) return -1;
  std::sort(known.begin(), known.end());
  const size_t n = known.size();
  return n % 2 ? known[n / 2] : (known[n / 2 - 1] + known[n / 2]) / 2;
}

std::vector<Straggler> StepRates::Check(Clock::TimePoint now,
                                        double median_per_s) {
  std::vector<Straggler> out;
  if (policy_.factor <= 0) return out;
  const double median =
      median_per_s >= 0 ? median_per_s : Median(Rates());
  for (auto& [rank, r] : ranks_) {
    const double rate = RateOf(r);
    const bool slow = median > 0 && rate >= 0 && rate * policy_.factor < median;
    if (!slow) {
      r.slow = false;
      r.reported = false;
      continue;
    }
    if (!r.slow) {
      r.slow = true;
      r.slow_since = now;
    }
    if (!r.reported && now - r.slow_since >= policy_.slow_for) {
      r.reported = true;
      out.push_back({rank, rate, median, now - r.slow_since});
    }
  }
  return out;
}

bool StepRates::Straggling(int rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.reported;
}

std::string DescribeStraggler(const Straggler& s, bool job_median) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "rank %d runs at %.2f steps/s, %.2fx the %s median %.2f "
                "steps/s, for %.0f s",
                s.rank, s.per_s,
                s.median_per_s > 0 ? s.per_s / s.median_per_s : 0.0,
                job_median ? "job's" : "node's", s.median_per_s,
                std::chrono::duration<double>(s.slow_for).count());
  return buf;
}

}  // namespace ddprun::agent
