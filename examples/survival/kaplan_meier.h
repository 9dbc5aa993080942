#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::examples {

// The Kaplan-Meier estimate of S(t) of one group: at each distinct event
// time t_i, S drops by the factor 1 - d_i / n_i (d_i events among the n_i
// subjects still at risk, i.e. with time >= t_i; censored subjects leave
// the risk set after their time).
struct KaplanMeierEstimate {
  std::vector<double> times;     // distinct event times, ascending
  std::vector<double> survival;  // S just after each of them
  std::vector<double> censored;  // times of censored subjects, ascending
  int64_t subjects = 0;
  int64_t events = 0;
};

// `time` and `event` (1 event, 0 censored) of the subjects whose
// `include` is true (all of them when `include` is empty). Inputs of
// different lengths are a programming error (std::invalid_argument).
KaplanMeierEstimate KaplanMeier(const std::vector<double>& time,
                                const std::vector<double>& event,
                                const std::vector<bool>& include = {});

// The log-rank test of two groups (`group` true / false): the chi-square
// statistic (1 degree of freedom) of observed against expected events in
// group true over all event times, and its p-value. chi2 0 and p 1 when a
// group is empty or no event happened.
struct LogRankResult {
  double chi2 = 0;
  double p = 1;
};
LogRankResult LogRank(const std::vector<double>& time,
                      const std::vector<double>& event,
                      const std::vector<bool>& group);

// Which subjects the model calls high risk: those whose score is above the
// lower median (the (n-1)/2-th smallest), i.e. the larger half (floor(n/2))
// for distinct scores; scores equal to the median count as low risk, so a
// constant model puts everyone in the low-risk group.
std::vector<bool> HighRiskHalf(const std::vector<double>& risk);

}  // namespace ddprun::examples
