// The training-curves plot and the bar chart, decoded by stb_image and
// inspected: geometry, non-blank, the series' colours where the data says.
#include <cmath>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "examples/outputs/bar_chart.h"
#include "examples/outputs/curve_plot.h"
#include "tests/outputs/png_probe.h"

namespace ddprun::examples::outputs {
namespace {

using testing::Decoded;
using testing::DecodePngBytes;

Decoded Decode(const RasterImage& image) {
  auto png = EncodePng(image);
  REQUIRE(png.ok());
  Decoded d = DecodePngBytes(*png);
  INFO(d.error);
  REQUIRE(d.ok);
  return d;
}

// Loss falling over 100 steps (per step and per epoch), a validation
// metric rising per epoch, a learning rate, samples/s.
SeriesMap TypicalRun() {
  SeriesMap s;
  for (int step = 1; step <= 100; ++step) {
    s["train/loss"].push_back({step, 2.0 * std::exp(-step / 30.0) + 0.1});
    s["train/lr"].push_back({step, 1e-3 * (1 - step / 200.0)});
    if (step % 20 == 0) {
      s["train/epoch_loss"].push_back({step, 2.0 * std::exp(-step / 30.0)});
      s["val/loss"].push_back({step, 2.2 * std::exp(-step / 40.0)});
      s["val/dice"].push_back({step, 0.3 + step / 200.0});
      s["train/samples_per_s"].push_back({step, 100.0 + step % 7});
    }
  }
  return s;
}

TEST_CASE("curve plot: families share panels in a fixed order", "[outputs]") {
  const std::vector<CurvePanel> panels = GroupCurvePanels(TypicalRun());
  REQUIRE(panels.size() == 4);
  CHECK(panels[0].title == "loss");
  CHECK(panels[0].tags ==
        std::vector<std::string>{"train/loss", "train/epoch_loss", "val/loss"});
  CHECK(panels[1].title == "dice");
  CHECK(panels[2].title == "learning rate");
  CHECK(panels[3].title == "samples/s");
}

TEST_CASE("curve plot: a PNG of the documented size showing the data",
          "[outputs]") {
  auto plot = PlotTrainingCurves("survival: training curves", TypicalRun());
  INFO(plot.status());
  REQUIRE(plot.ok());
  const Decoded d = Decode(*plot);
  CHECK(d.width == 1200);
  CHECK(d.height == CurvePlotHeight(4));
  CHECK(d.height == 56 + 2 * 380);
  CHECK(d.file_channels == 3);
  // Not blank: axes, text and curves cover a few percent of the image.
  CHECK(d.NonWhite() > d.width * d.height / 50);

  // The loss panel (top left): train/loss in blue (31,119,180) falls, so
  // its blue pixels on the left sit higher than those on the right.
  const int x0 = 90, x1 = 600 - 24, y0 = 56 + 34, y1 = 56 + 380 - 52;
  auto mean_y = [&](int from, int to) {
    double sum = 0;
    int n = 0;
    for (int y = y0; y < y1; ++y) {
      for (int x = from; x < to; ++x) {
        const uint8_t* p = d.At(x, y);
        if (std::abs(p[0] - 31) < 25 && std::abs(p[1] - 119) < 25 &&
            std::abs(p[2] - 180) < 25) {
          sum += y;
          ++n;
        }
      }
    }
    REQUIRE(n > 10);
    return sum / n;
  };
  const double left = mean_y(x0 + 10, x0 + 80);
  // (steps ~55-70: left of the legend in the top-right corner)
  const double right = mean_y(x1 - 220, x1 - 160);
  CHECK(left + 100 < right);  // y grows downwards
  // The per-epoch series (orange, green) are there too.
  CHECK(d.Count(255, 127, 14, 20, 0, 56, 600, 56 + 380) > 30);
  CHECK(d.Count(44, 160, 44, 20, 0, 56, 600, 56 + 380) > 30);
  // The dice panel (top right) draws its only series in blue.
  CHECK(d.Count(31, 119, 180, 20, 600, 56, 1200, 56 + 380) > 100);
}

TEST_CASE("curve plot: a long noisy series keeps its envelope", "[outputs]") {
  // 100k steps alternating between 0 and 1: drawn from at most two points
  // per pixel column, the band still spans both values everywhere.
  SeriesMap s;
  for (int step = 1; step <= 100000; ++step) {
    s["train/loss"].push_back({step, static_cast<double>(step % 2)});
  }
  auto plot = PlotTrainingCurves("t", s);
  REQUIRE(plot.ok());
  const Decoded d = Decode(*plot);
  // Plot area of the first panel: x 90..576, y 90..384; the band fills the
  // area between the ticks of 0 and 1, whatever they are.
  int full_columns = 0;
  for (int x = 100; x < 560; ++x) {
    int blue = 0;
    for (int y = 90; y < 384; ++y) {
      const uint8_t* p = d.At(x, y);
      blue += std::abs(p[0] - 31) < 30 && std::abs(p[2] - 180) < 30;
    }
    full_columns += blue > 100;
  }
  CHECK(full_columns > 440);
}

TEST_CASE("curve plot: one point and constant series still plot", "[outputs]") {
  SeriesMap s;
  s["val/c_index"].push_back({7, 0.5});
  s["train/lr"] = {{1, 1e-4}, {2, 1e-4}, {3, 1e-4}};
  auto plot = PlotTrainingCurves("t", s);
  INFO(plot.status());
  REQUIRE(plot.ok());
  CHECK(Decode(*plot).height == CurvePlotHeight(2));
}

TEST_CASE("curve plot: bad series give one clear error", "[outputs]") {
  CHECK(PlotTrainingCurves("t", {}).status().message() == "no scalars to plot");
  SeriesMap empty;
  empty["train/loss"] = {};
  CHECK(PlotTrainingCurves("t", empty).status().message() ==
        "scalar series 'train/loss' is empty");
  SeriesMap nan;
  nan["train/loss"] = {{1, 1.0}, {2, NAN}};
  const Status s = PlotTrainingCurves("t", nan).status();
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("'train/loss' at step 2") != std::string::npos);
}

const std::vector<std::string> kLabels = {
    "No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity",
    "Pleural Effusion"};

// Blue pixels in bar i's row.
int64_t BarPixels(const Decoded& d, int i) {
  return d.Count(31, 119, 180, 12, 0, 48 + 26 * i, d.width, 48 + 26 * (i + 1));
}

TEST_CASE("bar chart: bar lengths follow the values, NaN is n/a", "[outputs]") {
  BarChartOptions o;
  o.title = "vqa: per-label AUROC";
  o.value_label = "AUROC";
  o.reference = 0.5;
  auto chart = BarChart(kLabels, {1.0, 0.5, NAN, 0.25, 0.0}, o);
  INFO(chart.status());
  REQUIRE(chart.ok());
  const Decoded d = Decode(*chart);
  CHECK(d.width == kBarChartWidth);
  CHECK(d.height == BarChartHeight(5));
  const double full = BarPixels(d, 0), half = BarPixels(d, 1),
               quarter = BarPixels(d, 3);
  CHECK(full > 1000);
  CHECK(half / full == Approx(0.5).margin(0.03));
  CHECK(quarter / full == Approx(0.25).margin(0.03));
  CHECK(BarPixels(d, 2) == 0);  // n/a
  CHECK(BarPixels(d, 4) < 40);  // 0: no bar to speak of
}

TEST_CASE("bar chart: bad inputs give one clear error", "[outputs]") {
  BarChartOptions o;
  CHECK(BarChart({}, {}, o).status().message() == "bar chart without bars");
  CHECK(BarChart(kLabels, {0.5}, o).status().message() ==
        "bar chart has 5 labels but 1 values");
  const Status inf = BarChart({"a"}, {INFINITY}, o).status();
  CHECK(inf.code() == StatusCode::kInvalidArgument);
  CHECK(inf.message().find("'a'") != std::string::npos);
  const Status out = BarChart({"a", "b"}, {0.5, 1.5}, o).status();
  CHECK(out.message().find("bar 'b' has value 1.5") != std::string::npos);
  o.min = 1;
  CHECK(BarChart({"a"}, {1}, o).status().code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ddprun::examples::outputs
