#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs {

struct BarChartOptions {
  std::string title;                  // e.g. "vqa: per-label AUROC, epoch 3"
  std::string value_label = "value";  // the value axis, e.g. "AUROC"
  double min = 0, max = 1;            // the value axis range (fixed)
  double reference = NAN;             // a dashed line there (0.5: chance)
};

// Layout: kBarChartWidth wide, BarChartHeight(n) high.
inline constexpr int kBarChartWidth = 900;
inline int BarChartHeight(int bars) { return 48 + 26 * bars + 56; }

// Horizontal bars, one per label, top to bottom in the given order, each in
// the first palette colour (blue) from `min` to its value, the value written
// beside it. NaN means "undefined" (an AUROC over one class) and shows as
// "n/a" without a bar. Labels too long for the left third are cut with
// "...". INVALID_ARGUMENT for no labels, labels and values of different
// lengths, an infinite value, a value outside [min, max], or min >= max.
StatusOr<RasterImage> BarChart(const std::vector<std::string>& labels,
                               const std::vector<double>& values,
                               const BarChartOptions& options);

}  // namespace ddprun::examples::outputs
