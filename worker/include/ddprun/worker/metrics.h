#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ddprun/worker/world.h"

namespace ddprun::worker {

// Scalar reductions over all ranks (collective; identity when standalone).
double AllReduceSum(const World& world, double value);
double AllReduceMean(const World& world, double value);
// Weighted mean: sum(value*weight) / sum(weight) over ranks, for losses
// averaged over unequal sample counts. Returns 0 when the total weight is 0.
double AllReduceWeightedMean(const World& world, double value, double weight);

// Writes `line` to stderr (one write) on rank 0 only.
void LogMain(const World& world, const std::string& line);

// Progress line printed by rank 0:
//   "epoch 2/10 step 340/1700 loss 0.4312 samples/s 812.4 eta 00:03:12"
// Throughput counts samples of all ranks (global batch per step). Printing
// is rate-limited to one line per `min_interval`. Not collective: feed it
// values that are already reduced if all ranks should agree.
class ProgressMeter {
 public:
  ProgressMeter(
      World world, int64_t total_epochs, int64_t total_steps,
      std::chrono::milliseconds min_interval = std::chrono::seconds(5));

  // Records that `step` (global, 1-based) finished with `loss` after
  // processing `global_samples` samples in this step. Prints when due.
  void Update(int64_t epoch, int64_t step, double loss, int64_t global_samples);
  // A line now (end of epoch); none if Update() printed the last step's.
  void Flush();
  // The line that would be printed now (tests).
  std::string Line() const;
  // Samples per second since the first step finished: the first step
  // only starts the clock (start-up is not training speed), so there is no
  // rate before a second step has finished; rate_measured() says whether
  // there is one, and samples_per_second() is 0 until then.
  bool rate_measured() const;
  double samples_per_second() const;

 private:
  World world_;
  int64_t total_epochs_;
  int64_t total_steps_;
  std::chrono::milliseconds min_interval_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  int64_t first_step_ = -1;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  double loss_ = 0;
  int64_t samples_ = 0;
};

}  // namespace ddprun::worker
