#pragma once

#include <string>
#include <vector>

#include "examples/outputs/canvas.h"

namespace ddprun::examples::outputs {

// Round tick positions (1, 2 or 5 times a power of ten apart) covering
// [lo, hi] with about `target` intervals: the first tick <= lo, the last
// >= hi. lo == hi gets a range around the value. Requires finite lo <= hi.
std::vector<double> NiceTicks(double lo, double hi, int target);

// A tick label as short as the tick spacing allows: "0.25", "1200",
// "2e-05".
std::string FormatTick(double value, double spacing);

// A plot rectangle in pixels and the data range it shows.
struct AxisBox {
  double left = 0, top = 0, right = 0, bottom = 0;    // pixels
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // data

  double X(double x) const {
    return left + (x - x_min) / (x_max - x_min) * (right - left);
  }
  double Y(double y) const {
    return bottom - (y - y_min) / (y_max - y_min) * (bottom - top);
  }
};

// Frame, light grid lines at the ticks, tick labels and axis labels (the y
// label reads upwards left of the tick labels). Empty `x_ticks` draws no
// x ticks (a bar chart's category axis).
void DrawAxes(Canvas* canvas, const AxisBox& box,
              const std::vector<double>& x_ticks,
              const std::vector<double>& y_ticks, const std::string& x_label,
              const std::string& y_label);

}  // namespace ddprun::examples::outputs
