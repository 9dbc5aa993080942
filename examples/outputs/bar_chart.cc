#include "examples/outputs/bar_chart.h"

#include <algorithm>
#include <cstdio>

#include "examples/outputs/canvas.h"
#include "examples/outputs/chart_axes.h"

namespace ddprun::examples::outputs {
namespace {

constexpr double kLabelFont = 13;
constexpr int kRow = 26;
constexpr int kTop = 48;

// `v` with `digits` significant digits (6 in error messages, 3 on bars).
std::string Num(double v, int digits = 6) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*g", digits, v);
  return text;
}

Status CheckBars(const std::vector<std::string>& labels,
                 const std::vector<double>& values, const BarChartOptions& o) {
  if (labels.empty()) return InvalidArgumentError("bar chart without bars");
  if (labels.size() != values.size()) {
    return InvalidArgumentError("bar chart has " +
                                std::to_string(labels.size()) + " labels but " +
                                std::to_string(values.size()) + " values");
  }
  if (!std::isfinite(o.min) || !std::isfinite(o.max) || o.min >= o.max) {
    return InvalidArgumentError("bar chart range [" + Num(o.min) + ", " +
                                Num(o.max) + "] is empty or not finite");
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (std::isnan(v)) continue;  // shown as n/a
    if (!std::isfinite(v) || v < o.min || v > o.max) {
      return InvalidArgumentError("bar '" + labels[i] + "' has value " +
                                  Num(v) + " outside the axis range [" +
                                  Num(o.min) + ", " + Num(o.max) + "]");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<RasterImage> BarChart(const std::vector<std::string>& labels,
                               const std::vector<double>& values,
                               const BarChartOptions& options) {
  DDP_RETURN_IF_ERROR(CheckBars(labels, values, options));
  const int n = static_cast<int>(labels.size());
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Canvas> canvas,
                       Canvas::Create(kBarChartWidth, BarChartHeight(n)));
  double widest = 0;
  for (const std::string& l : labels) {
    widest = std::max(widest, canvas->TextWidth(l, kLabelFont));
  }
  const double label_width = std::min(widest, kBarChartWidth / 3.0);

  AxisBox box;
  box.left = 16 + label_width + 10;
  box.right = kBarChartWidth - 60;  // room for the value text of a full bar
  box.top = kTop;
  box.bottom = kTop + kRow * n;
  box.x_min = options.min;
  box.x_max = options.max;
  std::vector<double> ticks = NiceTicks(options.min, options.max, 5);
  ticks.erase(std::remove_if(ticks.begin(), ticks.end(),
                             [&](double t) {
                               return t < options.min - 1e-12 ||
                                      t > options.max + 1e-12;
                             }),
              ticks.end());

  canvas->SetColor({0.05, 0.05, 0.05});
  const auto [title, title_size] =
      canvas->FitText(options.title, kBarChartWidth - 20, 17, /*bold=*/true);
  canvas->Text(kBarChartWidth / 2.0, 30, title, title_size,
               Canvas::Align::kCenter, /*bold=*/true);
  // Vertical grid lines at the value ticks; the category axis has none.
  DrawAxes(canvas.get(), box, ticks, {}, options.value_label, "");

  cairo_t* cr = canvas->cr();
  for (int i = 0; i < n; ++i) {
    if (std::isnan(values[i])) continue;
    canvas->SetColor(PaletteColor(0));
    cairo_rectangle(cr, box.left + 1, kTop + kRow * i + 4,
                    box.X(values[i]) - box.left - 1, kRow - 8);
    cairo_fill(cr);
  }
  // The reference line over the bars, under the text.
  if (std::isfinite(options.reference) && options.reference >= options.min &&
      options.reference <= options.max) {
    const double dash[] = {6, 4};
    cairo_set_dash(cr, dash, 2, 0);
    canvas->SetColor({0.35, 0.35, 0.35});
    cairo_set_line_width(cr, 1.5);
    cairo_move_to(cr, box.X(options.reference), box.top);
    cairo_line_to(cr, box.X(options.reference), box.bottom);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
  }
  for (int i = 0; i < n; ++i) {
    const double mid = kTop + kRow * i + kRow / 2.0;
    canvas->SetColor({0.1, 0.1, 0.1});
    const auto [label, size] =
        canvas->FitText(labels[i], label_width, kLabelFont);
    canvas->Text(box.left - 10, mid + 4.5, label, size, Canvas::Align::kRight);
    if (std::isnan(values[i])) {
      canvas->SetColor({0.45, 0.45, 0.45});
      canvas->Text(box.left + 6, mid + 4.5, "n/a", kLabelFont);
    } else {
      canvas->Text(box.X(values[i]) + 6, mid + 4.5, Num(values[i], 3),
                   kLabelFont);
    }
  }
  return canvas->ToRaster();
}

}  // namespace ddprun::examples::outputs
