#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddprun::examples::outputs {

struct ScalarPoint {
  int64_t step = 0;
  double value = 0;
};

// Scalar series by TensorBoard tag ("train/loss"), points in the order they
// were recorded.
using SeriesMap = std::map<std::string, std::vector<ScalarPoint>>;

// Adds the series of a later attempt of the same run to `into`. A restarted
// run resumes from a checkpoint and records again the steps after it, so
// for each tag of `later` the points of `into` at or after that tag's first
// step in `later` are dropped (they belong to work the restart threw away);
// this is what TensorBoard does with the steps of a restarted run.
void MergeLaterAttempt(const SeriesMap& later, SeriesMap* into);

}  // namespace ddprun::examples::outputs
