// Straggler detection (agent/watch/step_rates.*) on an injected clock.

#include "agent/watch/step_rates.h"

#include "ddprun_catch.h"

namespace ddprun::agent {
namespace {

using std::chrono::seconds;

// Four ranks stepping at `per_s` each, observed once a second for `secs`.
void Run(StepRates* rates, FakeClock* clock, const std::vector<double>& per_s,
         int secs, std::vector<double>* counts,
         std::vector<Straggler>* found) {
  for (int t = 0; t < secs; ++t) {
    clock->Advance(seconds(1));
    for (size_t r = 0; r < per_s.size(); ++r) {
      (*counts)[r] += per_s[r];
      rates->Observe(static_cast<int>(r), static_cast<int64_t>((*counts)[r]),
                     clock->Now());
    }
    for (const Straggler& s : rates->Check(clock->Now(), -1)) {
      found->push_back(s);
    }
  }
}

TEST_CASE("StepRates: rates over the window, the median",
          "[agent][stragglers]") {
  FakeClock clock;
  StepRates rates(StragglerPolicy{});
  rates.Observe(0, 0, clock.Now());
  CHECK(rates.Rates()[0].per_s < 0);  // one count: unknown
  clock.Advance(seconds(1));
  rates.Observe(0, 5, clock.Now());
  CHECK(rates.Rates()[0].per_s < 0);  // 1 s < min_span
  clock.Advance(seconds(1));
  rates.Observe(0, 10, clock.Now());
  CHECK(rates.Rates()[0].per_s == Approx(5.0));
  CHECK(rates.Rates()[0].steps == 10);
  // Only the last 10 s count: the rank slowed down to 1 step/s.
  for (int i = 0; i < 20; ++i) {
    clock.Advance(seconds(1));
    rates.Observe(0, 10 + i + 1, clock.Now());
  }
  CHECK(rates.Rates()[0].per_s == Approx(1.0));
  // A restarted worker counts from 0 again.
  clock.Advance(seconds(1));
  rates.Observe(0, 0, clock.Now());
  CHECK(rates.Rates()[0].per_s < 0);
  CHECK(StepRates::Median({{0, 0, 1.0}, {1, 0, 3.0}, {2, 0, -1}}) ==
        Approx(2.0));
  CHECK(StepRates::Median({{0, 0, 4.0}, {1, 0, 1.0}, {2, 0, 2.0}}) ==
        Approx(2.0));
  CHECK(StepRates::Median({}) < 0);
}

TEST_CASE("StepRates: a rank at less than half the median for 30 s is "
          "reported once",
          "[agent][stragglers]") {
  FakeClock clock;
  StepRates rates(StragglerPolicy{});
  std::vector<double> counts(4, 0);
  std::vector<Straggler> found;
  // Rank 2 at 0.4x the others: slow from the first known rate.
  // Rates are known from t = 3 s (two counts 2 s apart): reported at 33 s.
  Run(&rates, &clock, {5, 5, 2, 5}, 32, &counts, &found);
  CHECK(found.empty());  // slow for 29 s only
  Run(&rates, &clock, {5, 5, 2, 5}, 1, &counts, &found);
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 2);
  CHECK(found[0].per_s == Approx(2.0));
  CHECK(found[0].median_per_s == Approx(5.0));
  CHECK(DescribeStraggler(found[0], false) ==
        "rank 2 runs at 2.00 steps/s, 0.40x the node's median 5.00 steps/s, "
        "for 30 s");
  // Reported once while it stays slow.
  Run(&rates, &clock, {5, 5, 2, 5}, 20, &counts, &found);
  CHECK(found.size() == 1);
  // It catches up, then falls behind again: a new report 30 s later.
  Run(&rates, &clock, {5, 5, 5, 5}, 15, &counts, &found);
  CHECK(found.size() == 1);
  Run(&rates, &clock, {5, 5, 1, 5}, 45, &counts, &found);
  CHECK(found.size() == 2);
}

TEST_CASE("StepRates: 1.5x slower is no straggler at factor 2, the job's "
          "median decides when given, and factor 0 is off",
          "[agent][stragglers]") {
  FakeClock clock;
  StepRates rates(StragglerPolicy{});
  std::vector<double> counts(2, 0);
  std::vector<Straggler> found;
  Run(&rates, &clock, {3, 2}, 60, &counts, &found);
  CHECK(found.empty());
  // Against a job median of 10 steps/s (the other node runs fast), both
  // ranks of this node are slow.
  for (int t = 0; t < 31; ++t) {
    clock.Advance(seconds(1));
    counts[0] += 3;
    counts[1] += 2;
    rates.Observe(0, static_cast<int64_t>(counts[0]), clock.Now());
    rates.Observe(1, static_cast<int64_t>(counts[1]), clock.Now());
    for (const Straggler& s : rates.Check(clock.Now(), 10.0)) {
      found.push_back(s);
    }
  }
  CHECK(found.size() == 2);
  StragglerPolicy off;
  off.factor = 0;
  StepRates none(off);
  std::vector<double> c(2, 0);
  std::vector<Straggler> f;
  Run(&none, &clock, {5, 0.5}, 60, &c, &f);
  CHECK(f.empty());
}

}  // namespace
}  // namespace ddprun::agent
