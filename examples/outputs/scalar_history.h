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

// Drops the points at `step` or later, of every tag: an attempt that
// restarts from the checkpoint of step `step - 1` records those steps again,
// and the failed attempt's values for them belong to work the restart threw
// away. TensorBoard does the same on an event file's SessionLog START.
void PurgeFrom(int64_t step, SeriesMap* series);

// Appends the points of `later` to those of `into`, tag by tag.
void AppendSeries(const SeriesMap& later, SeriesMap* into);

}  // namespace ddprun::examples::outputs
