#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/outputs/raster_image.h"
#include "examples/outputs/scalar_history.h"

namespace ddprun::examples::outputs {

// One panel of the training-curves figure: the series of one family.
struct CurvePanel {
  std::string key;    // "loss", "lr", "dice", ...
  std::string title;  // "loss", "learning rate", "samples/s", "dice"
  std::vector<std::string> tags;  // drawn in this order, palette colours
};

// Families by the tag's last path component without an "epoch_" prefix:
// train/loss, train/epoch_loss and val/loss share the "loss" panel;
// val/dice gets its own. Panel order: loss, the other families by name,
// then lr ("learning rate") and samples_per_s ("samples/s"). Tags in a
// panel: by prefix (train before val), per-step before per-epoch, by name.
std::vector<CurvePanel> GroupCurvePanels(const SeriesMap& series);

// Layout of PlotTrainingCurves: panels two per row, each kCurvePanelWidth x
// kCurvePanelHeight below a title band.
inline constexpr int kCurvePlotWidth = 1200;
inline constexpr int kCurvePanelWidth = kCurvePlotWidth / 2;
inline constexpr int kCurvePanelHeight = 380;
inline constexpr int kCurveTitleHeight = 56;
inline int CurvePlotHeight(int panels) {
  return kCurveTitleHeight + kCurvePanelHeight * ((panels + 1) / 2);
}

// The training curves as an RGB image of kCurvePlotWidth x
// CurvePlotHeight(panels): `title` on top (the trainer's name), one panel
// per family with its own y axis, every panel's x axis the global step over
// the whole run, a legend of tags in the corner the curves cross least;
// series with up to 60 points get markers
// (per-epoch values), longer ones a thin line (per-step values).
// INVALID_ARGUMENT naming the problem for no series at all, an empty series
// or a non-finite value (the tag and step).
StatusOr<RasterImage> PlotTrainingCurves(const std::string& title,
                                         const SeriesMap& series);

}  // namespace ddprun::examples::outputs
