#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs {

// One Kaplan-Meier curve: S(t) is `survival[i]` from `times[i]` until the
// next time (a step function), 1 before times[0]; `censored` are the times
// of censored subjects, marked on the curve with a short vertical tick.
struct SurvivalCurve {
  std::string label;  // e.g. "low risk (n=16, 5 events)"
  std::vector<double> times;
  std::vector<double> survival;
  std::vector<double> censored;
};

// Layout: kSurvivalPlotWidth x kSurvivalPlotHeight.
inline constexpr int kSurvivalPlotWidth = 800;
inline constexpr int kSurvivalPlotHeight = 520;

// The curves as steps in the palette's colours (curve i: PaletteColor of
// colors[i], or i without `colors`) over x = time from 0 to the last time of
// any curve (its events and censorings), y = survival probability 0..1;
// `title` on top, a legend of the labels in the corner the curves cross
// least (bottom left, bottom right, top right, in that order on a tie). INVALID_ARGUMENT naming
// the curve for: no curves, times and survival of different lengths, a
// negative, non-finite or decreasing time, a survival value outside
// [0, 1], a censoring time that is negative or not finite, or `colors` of
// another length than `curves`.
StatusOr<RasterImage> PlotSurvivalCurves(
    const std::string& title, const std::vector<SurvivalCurve>& curves,
    const std::vector<int>& colors = {});

}  // namespace ddprun::examples::outputs
