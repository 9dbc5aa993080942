#include "examples/outputs/scalar_history.h"

#include <algorithm>

namespace ddprun::examples::outputs {

void PurgeFrom(int64_t step, SeriesMap* series) {
  for (auto it = series->begin(); it != series->end();) {
    std::vector<ScalarPoint>& points = it->second;
    points.erase(
        std::remove_if(points.begin(), points.end(),
                       [step](const ScalarPoint& p) { return p.step >= step; }),
        points.end());
    it = points.empty() ? series->erase(it) : std::next(it);
  }
}

void AppendSeries(const SeriesMap& later, SeriesMap* into) {
  for (const auto& [tag, points] : later) {
    std::vector<ScalarPoint>& kept = (*into)[tag];
    kept.insert(kept.end(), points.begin(), points.end());
  }
}

}  // namespace ddprun::examples::outputs
