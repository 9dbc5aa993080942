// The Kaplan-Meier plot (survival_trainer's validation picture), decoded by
// stb_image and inspected: size, each curve's colour where its data puts
// it, censoring ticks, bad input.
#include <cmath>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "examples/survival/survival_curves.h"
#include "tests/outputs/png_probe.h"

namespace ddprun::examples::outputs {
namespace {

using testing::Decoded;

Decoded Decode(const RasterImage& image) {
  Decoded d = testing::DecodeRaster(image);
  INFO(d.error);
  REQUIRE(d.ok);
  return d;
}

// Plot area (PlotSurvivalCurves' layout): x 78..776, y 52..464, y axis
// 0..1.02, x axis 0..10 for these curves.
constexpr int kLeft = 78, kRight = 776, kTop = 52, kBottom = 464;
double PixelY(double s) { return kBottom - s / 1.02 * (kBottom - kTop); }
double PixelX(double t) { return kLeft + t / 10.0 * (kRight - kLeft); }

// Mean row of the pixels of colour (r, g, b) in columns [x0, x1) of the
// plot area, or -1 without any.
double MeanRow(const Decoded& d, int r, int g, int b, int x0, int x1) {
  double sum = 0;
  int n = 0;
  for (int y = kTop - 3; y < kBottom + 4; ++y) {
    for (int x = x0; x < x1; ++x) {
      const uint8_t* p = d.At(x, y);
      if (std::abs(p[0] - r) < 30 && std::abs(p[1] - g) < 30 &&
          std::abs(p[2] - b) < 30) {
        sum += y;
        ++n;
      }
    }
  }
  return n ? sum / n : -1;
}

TEST_CASE("survival curves: each group's steps where its data puts them",
          "[outputs]") {
  SurvivalCurve low{"low risk (n=3, 1 events)", {8}, {2.0 / 3}, {10, 10}};
  SurvivalCurve high{
      "high risk (n=4, 4 events)", {1, 2, 3, 4}, {0.75, 0.5, 0.25, 0}, {}};
  auto plot = PlotSurvivalCurves("validation", {low, high}, {0, 3});
  INFO(plot.status());
  REQUIRE(plot.ok());
  const Decoded d = Decode(*plot);
  CHECK(d.width == kSurvivalPlotWidth);
  CHECK(d.height == kSurvivalPlotHeight);
  CHECK(d.file_channels == 3);
  // Blue (low risk) stays at 1 until t=8, then 2/3 (right of the legend's
  // box, which sits in the bottom left).
  const int mid = static_cast<int>(PixelX(5));
  CHECK(MeanRow(d, 31, 119, 180, mid - 20, mid + 20) ==
        Approx(PixelY(1)).margin(3));
  const int late = static_cast<int>(PixelX(9));
  CHECK(MeanRow(d, 31, 119, 180, late - 10, late + 10) ==
        Approx(PixelY(2.0 / 3)).margin(4));
  // Red (high risk) is at 0.25 between t=3 and t=4 and ends at its last
  // event, t=4.
  const int last = static_cast<int>(PixelX(3.5));
  CHECK(MeanRow(d, 214, 39, 40, last - 5, last + 5) ==
        Approx(PixelY(0.25)).margin(3));
  CHECK(MeanRow(d, 214, 39, 40, mid - 20, mid + 20) == -1);
  // Between t=2 and t=3 it is at 0.5.
  const int step = static_cast<int>(PixelX(2.5));
  CHECK(MeanRow(d, 214, 39, 40, step - 5, step + 5) ==
        Approx(PixelY(0.5)).margin(3));
  // The censoring ticks at t=10 reach above the blue line.
  const int end = static_cast<int>(PixelX(10));
  const double tick_top = PixelY(2.0 / 3) - 4;
  CHECK(d.Count(31, 119, 180, 40, end - 3, static_cast<int>(tick_top) - 2,
                end + 3, static_cast<int>(tick_top) + 1) > 0);
}

// Dark (legend text) pixels inside the plot area's corner boxes, away from
// the frame.
int64_t LegendText(const Decoded& d, bool top, bool right) {
  const int x0 = right ? kRight - 300 : kLeft + 4;
  const int y0 = top ? kTop + 4 : kBottom - 70;
  return d.Count(25, 25, 25, 40, x0, y0, right ? kRight - 4 : kLeft + 300,
                 top ? kTop + 70 : kBottom - 4);
}

TEST_CASE("survival curves: the legend goes where the curves are not",
          "[outputs]") {
  const std::string a = "low risk (n=16, 8 events)";
  const std::string b = "high risk (n=16, 15 events)";
  const Decoded usual = Decode(*PlotSurvivalCurves(
      "t", {{a, {1, 2}, {0.9, 0.8}, {10}}, {b, {3}, {0.7}, {10}}}));
  CHECK(LegendText(usual, false, false) > 50);
  CHECK(LegendText(usual, true, true) == 0);
  // Most die early: the bottom is crossed, the top right is empty.
  const Decoded early = Decode(*PlotSurvivalCurves(
      "t", {{a, {0.5}, {0.1}, {10}}, {b, {0.3, 0.6}, {0.5, 0.15}, {10}}}));
  CHECK(LegendText(early, false, false) == 0);
  CHECK(LegendText(early, false, true) == 0);
  CHECK(LegendText(early, true, true) > 50);
}

TEST_CASE("survival curves: bad input gives one clear error", "[outputs]") {
  CHECK(PlotSurvivalCurves("t", {}).status().message() == "no survival curves");
  SurvivalCurve c{"a", {1, 2}, {0.5}, {}};
  CHECK(PlotSurvivalCurves("t", {c}).status().message() ==
        "survival curve 'a': 2 times but 1 survival values");
  c.survival = {0.5, 1.5};
  CHECK(PlotSurvivalCurves("t", {c}).status().message() ==
        "survival curve 'a': survival 1.5 is outside [0, 1]");
  c = {"b", {2, 1}, {0.5, 0.2}, {}};
  CHECK(PlotSurvivalCurves("t", {c}).status().message() ==
        "survival curve 'b': times decrease at 1");
  c = {"c", {1}, {0.5}, {NAN}};
  CHECK(PlotSurvivalCurves("t", {c}).status().code() ==
        StatusCode::kInvalidArgument);
  c = {"d", {1}, {0.5}, {}};
  CHECK(PlotSurvivalCurves("t", {c}, {0, 1}).status().message() ==
        "2 colours for 1 survival curves");
  // An empty group (everyone censored at 0 events) still plots.
  SurvivalCurve empty{"none", {}, {}, {}};
  CHECK(PlotSurvivalCurves("t", {empty}).ok());
}

}  // namespace
}  // namespace ddprun::examples::outputs
