#include "examples/survival/survival_curves.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "examples/outputs/canvas.h"
#include "examples/outputs/chart_axes.h"

namespace ddprun::examples::outputs {
namespace {

constexpr double kLegendFont = 13;

std::string Num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Status CheckCurve(const SurvivalCurve& c) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("survival curve '" + c.label + "': " + what);
  };
  if (c.times.size() != c.survival.size()) {
    return bad(std::to_string(c.times.size()) + " times but " +
               std::to_string(c.survival.size()) + " survival values");
  }
  for (size_t i = 0; i < c.times.size(); ++i) {
    if (!std::isfinite(c.times[i]) || c.times[i] < 0)
      return bad("time " + Num(c.times[i]) + " is negative or not finite");
    if (i > 0 && c.times[i] < c.times[i - 1])
      return bad("times decrease at " + Num(c.times[i]));
    if (!(c.survival[i] >= 0 && c.survival[i] <= 1))
      return bad("survival " + Num(c.survival[i]) + " is outside [0, 1]");
  }
  for (double t : c.censored) {
    if (!std::isfinite(t) || t < 0)
      return bad("censoring time " + Num(t) + " is negative or not finite");
  }
  return Status::Ok();
}

// S(t) of the step function.
double SurvivalAt(const SurvivalCurve& c, double t) {
  double s = 1;
  for (size_t i = 0; i < c.times.size() && c.times[i] <= t; ++i) {
    s = c.survival[i];
  }
  return s;
}

void DrawCurve(Canvas* canvas, const AxisBox& box, const SurvivalCurve& c,
               const Rgb& color) {
  cairo_t* cr = canvas->cr();
  canvas->SetColor(color);
  cairo_set_line_width(cr, 2.2);
  double s = 1;
  cairo_move_to(cr, box.X(0), box.Y(s));
  for (size_t i = 0; i < c.times.size(); ++i) {
    cairo_line_to(cr, box.X(c.times[i]), box.Y(s));
    s = c.survival[i];
    cairo_line_to(cr, box.X(c.times[i]), box.Y(s));
  }
  double last = c.times.empty() ? 0 : c.times.back();
  for (double t : c.censored) last = std::max(last, t);
  cairo_line_to(cr, box.X(last), box.Y(s));
  cairo_stroke(cr);
  cairo_set_line_width(cr, 1.5);
  for (double t : c.censored) {
    const double x = box.X(t), y = box.Y(SurvivalAt(c, t));
    cairo_move_to(cr, x, y - 5);
    cairo_line_to(cr, x, y + 5);
  }
  cairo_stroke(cr);
}

// Pixel columns in [x, x + w) where a curve's level lies in [y, y + h)
// (counted per curve), a curve ending at its last event or censoring.
int64_t CurvePixelsIn(const AxisBox& box,
                      const std::vector<SurvivalCurve>& curves, double x,
                      double y, double w, double h) {
  int64_t n = 0;
  for (const SurvivalCurve& c : curves) {
    double last = c.times.empty() ? 0 : c.times.back();
    for (double t : c.censored) last = std::max(last, t);
    for (double px = x; px < x + w; px += 1) {
      const double t = box.x_min + (px - box.left) / (box.right - box.left) *
                                       (box.x_max - box.x_min);
      if (t > last) break;
      const double py = box.Y(SurvivalAt(c, t));
      if (py >= y - 3 && py < y + h + 3) ++n;
    }
  }
  return n;
}

void DrawLegend(Canvas* canvas, const AxisBox& box,
                const std::vector<SurvivalCurve>& curves,
                const std::vector<Rgb>& colors) {
  constexpr double kRow = 19, kSwatch = 22, kPad = 7;
  double widest = 0;
  for (const SurvivalCurve& c : curves) {
    widest = std::max(widest, canvas->TextWidth(c.label, kLegendFont));
  }
  const double w = kPad * 3 + kSwatch + widest;
  const double h = kPad * 2 + kRow * curves.size() - 4;
  // The corner the curves cross least: bottom left (usually empty: curves
  // start at 1), then bottom right, then top right.
  double x = box.left + 10, y = box.bottom - h - 10;
  int64_t least = -1;
  for (const auto& [cx, cy] :
       {std::pair<double, double>{box.left + 10, box.bottom - h - 10},
        {box.right - w - 10, box.bottom - h - 10},
        {box.right - w - 10, box.top + 10}}) {
    const int64_t crossed = CurvePixelsIn(box, curves, cx, cy, w, h);
    if (least < 0 || crossed < least) {
      least = crossed;
      x = cx;
      y = cy;
    }
  }
  cairo_t* cr = canvas->cr();
  canvas->SetColor({1, 1, 1}, 0.9);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill_preserve(cr);
  canvas->SetColor({0.7, 0.7, 0.7});
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (size_t i = 0; i < curves.size(); ++i) {
    const double mid = y + kPad + kRow * i + kRow / 2 - 2;
    canvas->SetColor(colors[i]);
    cairo_set_line_width(cr, 2.2);
    cairo_move_to(cr, x + kPad, mid);
    cairo_line_to(cr, x + kPad + kSwatch, mid);
    cairo_stroke(cr);
    canvas->SetColor({0.1, 0.1, 0.1});
    canvas->Text(x + kPad * 2 + kSwatch, mid + 4.5, curves[i].label,
                 kLegendFont);
  }
}

}  // namespace

StatusOr<RasterImage> PlotSurvivalCurves(
    const std::string& title, const std::vector<SurvivalCurve>& curves,
    const std::vector<int>& colors) {
  if (curves.empty()) return InvalidArgumentError("no survival curves");
  if (!colors.empty() && colors.size() != curves.size()) {
    return InvalidArgumentError(
        std::to_string(colors.size()) + " colours for " +
        std::to_string(curves.size()) + " survival curves");
  }
  double t_max = 0;
  for (const SurvivalCurve& c : curves) {
    DDP_RETURN_IF_ERROR(CheckCurve(c));
    if (!c.times.empty()) t_max = std::max(t_max, c.times.back());
    for (double t : c.censored) t_max = std::max(t_max, t);
  }
  if (t_max <= 0) t_max = 1;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Canvas> canvas,
                       Canvas::Create(kSurvivalPlotWidth, kSurvivalPlotHeight));
  AxisBox box;
  box.left = 78;
  box.right = kSurvivalPlotWidth - 24;
  box.top = 52;
  box.bottom = kSurvivalPlotHeight - 56;
  const std::vector<double> x_ticks = NiceTicks(0, t_max, 8);
  box.x_min = 0;
  box.x_max = x_ticks.back();
  box.y_min = 0;
  box.y_max = 1.02;
  canvas->SetColor({0.05, 0.05, 0.05});
  const auto [text, size] =
      canvas->FitText(title, kSurvivalPlotWidth - 20, 16, /*bold=*/true);
  canvas->Text(kSurvivalPlotWidth / 2.0, 30, text, size, Canvas::Align::kCenter,
               /*bold=*/true);
  DrawAxes(canvas.get(), box, x_ticks, {0, 0.2, 0.4, 0.6, 0.8, 1.0}, "time",
           "survival probability");
  std::vector<Rgb> rgb;
  for (size_t i = 0; i < curves.size(); ++i) {
    rgb.push_back(
        PaletteColor(colors.empty() ? static_cast<int>(i) : colors[i]));
    DrawCurve(canvas.get(), box, curves[i], rgb.back());
  }
  DrawLegend(canvas.get(), box, curves, rgb);
  return canvas->ToRaster();
}

}  // namespace ddprun::examples::outputs
