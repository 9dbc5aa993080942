#include "examples/outputs/scalar_history.h"

#include <algorithm>

namespace ddprun::examples::outputs {

void MergeLaterAttempt(const SeriesMap& later, SeriesMap* into) {
  for (const auto& [tag, points] : later) {
    if (points.empty()) continue;
    int64_t first = points.front().step;
    for (const ScalarPoint& p : points) first = std::min(first, p.step);
    std::vector<ScalarPoint>& kept = (*into)[tag];
    kept.erase(std::remove_if(
                   kept.begin(), kept.end(),
                   [first](const ScalarPoint& p) { return p.step >= first; }),
               kept.end());
    kept.insert(kept.end(), points.begin(), points.end());
  }
}

}  // namespace ddprun::examples::outputs
