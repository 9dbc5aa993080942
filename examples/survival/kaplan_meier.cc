#include "examples/survival/kaplan_meier.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace ddprun::examples {
namespace {

void CheckSizes(size_t time, size_t event, size_t other) {
  if (time != event || (other != 0 && other != time)) {
    throw std::invalid_argument("survival arrays of different lengths");
  }
}

// Subject indices ordered by time.
std::vector<size_t> ByTime(const std::vector<double>& time) {
  std::vector<size_t> order(time.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return time[a] < time[b]; });
  return order;
}

}  // namespace

KaplanMeierEstimate KaplanMeier(const std::vector<double>& time,
                                const std::vector<double>& event,
                                const std::vector<bool>& include) {
  CheckSizes(time.size(), event.size(), include.size());
  std::vector<size_t> order;
  for (size_t i : ByTime(time)) {
    if (include.empty() || include[i]) order.push_back(i);
  }
  KaplanMeierEstimate km;
  km.subjects = static_cast<int64_t>(order.size());
  int64_t at_risk = km.subjects;
  double s = 1;
  for (size_t k = 0; k < order.size();) {
    const double t = time[order[k]];
    int64_t deaths = 0, leaving = 0;
    for (; k < order.size() && time[order[k]] == t; ++k, ++leaving) {
      if (event[order[k]] != 0) {
        ++deaths;
      } else {
        km.censored.push_back(t);
      }
    }
    if (deaths > 0) {
      s *= 1.0 - static_cast<double>(deaths) / at_risk;
      km.times.push_back(t);
      km.survival.push_back(s);
      km.events += deaths;
    }
    at_risk -= leaving;
  }
  return km;
}

LogRankResult LogRank(const std::vector<double>& time,
                      const std::vector<double>& event,
                      const std::vector<bool>& group) {
  CheckSizes(time.size(), event.size(), group.size());
  const std::vector<size_t> order = ByTime(time);
  double n = static_cast<double>(order.size());
  double n1 = static_cast<double>(std::count(group.begin(), group.end(), true));
  double observed_minus_expected = 0, variance = 0;
  for (size_t k = 0; k < order.size();) {
    const double t = time[order[k]];
    double d = 0, d1 = 0, leaving = 0, leaving1 = 0;
    for (; k < order.size() && time[order[k]] == t; ++k) {
      const size_t i = order[k];
      leaving += 1;
      leaving1 += group[i];
      if (event[i] != 0) {
        d += 1;
        d1 += group[i];
      }
    }
    if (d > 0 && n > 1) {
      observed_minus_expected += d1 - d * n1 / n;
      variance += d * (n1 / n) * (1 - n1 / n) * (n - d) / (n - 1);
    }
    n -= leaving;
    n1 -= leaving1;
  }
  LogRankResult r;
  if (variance <= 0) return r;
  r.chi2 = observed_minus_expected * observed_minus_expected / variance;
  // Chi-square with one degree of freedom: P(X > c) = erfc(sqrt(c / 2)).
  r.p = std::erfc(std::sqrt(r.chi2 / 2));
  return r;
}

std::vector<bool> HighRiskHalf(const std::vector<double>& risk) {
  std::vector<bool> high(risk.size(), false);
  if (risk.empty()) return high;
  std::vector<double> sorted = risk;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];
  for (size_t i = 0; i < risk.size(); ++i) high[i] = risk[i] > median;
  return high;
}

}  // namespace ddprun::examples
