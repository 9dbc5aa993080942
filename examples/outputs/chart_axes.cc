#include "examples/outputs/chart_axes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddprun::examples::outputs {
namespace {

constexpr Rgb kInk{0.15, 0.15, 0.15};
constexpr Rgb kGrid{0.88, 0.88, 0.88};
constexpr double kTickFont = 12;
constexpr double kLabelFont = 13;

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (hi - lo <= 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  // Nearest of 1, 2, 5, 10 (Heckbert's rounding): about `target` ticks.
  const double nice = fraction < 1.5 ? 1
                      : fraction < 3 ? 2
                      : fraction < 7 ? 5
                                     : 10;
  const double spacing = nice * magnitude;
  const double first = std::floor(lo / spacing + 1e-9) * spacing;
  const double last = std::ceil(hi / spacing - 1e-9) * spacing;
  std::vector<double> ticks;
  for (int i = 0;; ++i) {
    const double t = first + i * spacing;
    ticks.push_back(std::fabs(t) < spacing * 1e-9 ? 0.0 : t);
    if (t >= last - spacing * 1e-9) break;
  }
  return ticks;
}

std::string FormatTick(double value, double spacing) {
  char buf[32];
  const double mag = std::max(std::fabs(value), spacing);
  if (value != 0 && (mag >= 1e6 || spacing < 1e-3)) {
    std::snprintf(buf, sizeof(buf), "%.3g", value);
  } else {
    const int decimals =
        spacing >= 1 ? 0
                     : static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  }
  return buf;
}

void DrawAxes(Canvas* canvas, const AxisBox& box,
              const std::vector<double>& x_ticks,
              const std::vector<double>& y_ticks, const std::string& x_label,
              const std::string& y_label) {
  cairo_t* cr = canvas->cr();
  cairo_set_line_width(cr, 1);
  canvas->SetColor(kGrid);
  for (double t : x_ticks) {
    cairo_move_to(cr, std::round(box.X(t)) + 0.5, box.top);
    cairo_line_to(cr, std::round(box.X(t)) + 0.5, box.bottom);
  }
  for (double t : y_ticks) {
    cairo_move_to(cr, box.left, std::round(box.Y(t)) + 0.5);
    cairo_line_to(cr, box.right, std::round(box.Y(t)) + 0.5);
  }
  cairo_stroke(cr);

  canvas->SetColor(kInk);
  cairo_rectangle(cr, box.left + 0.5, box.top + 0.5, box.right - box.left,
                  box.bottom - box.top);
  cairo_stroke(cr);
  const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  const double y_spacing = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1;
  for (double t : x_ticks) {
    cairo_move_to(cr, box.X(t), box.bottom);
    cairo_line_to(cr, box.X(t), box.bottom + 4);
    canvas->Text(box.X(t), box.bottom + 17, FormatTick(t, x_spacing), kTickFont,
                 Canvas::Align::kCenter);
  }
  double widest = 0;
  for (double t : y_ticks) {
    cairo_move_to(cr, box.left - 4, box.Y(t));
    cairo_line_to(cr, box.left, box.Y(t));
    const std::string label = FormatTick(t, y_spacing);
    widest = std::max(widest, canvas->TextWidth(label, kTickFont));
    canvas->Text(box.left - 7, box.Y(t) + 4, label, kTickFont,
                 Canvas::Align::kRight);
  }
  cairo_stroke(cr);
  if (!x_label.empty()) {
    canvas->Text((box.left + box.right) / 2, box.bottom + 36, x_label,
                 kLabelFont, Canvas::Align::kCenter);
  }
  if (!y_label.empty()) {
    canvas->Text(box.left - widest - 14, (box.top + box.bottom) / 2, y_label,
                 kLabelFont, Canvas::Align::kCenter, false, -M_PI / 2);
  }
}

}  // namespace ddprun::examples::outputs
