#include "examples/outputs/curve_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "examples/outputs/canvas.h"
#include "examples/outputs/chart_axes.h"

namespace ddprun::examples::outputs {
namespace {

constexpr size_t kMarkerMaxPoints = 60;

struct Family {
  std::string key;
  bool per_epoch = false;
};

Family FamilyOf(const std::string& tag) {
  const size_t slash = tag.rfind('/');
  std::string key = slash == std::string::npos ? tag : tag.substr(slash + 1);
  const bool per_epoch = key.rfind("epoch_", 0) == 0 && key.size() > 6;
  if (per_epoch) key = key.substr(6);
  return {key, per_epoch};
}

std::string PanelTitle(const std::string& key) {
  if (key == "lr") return "learning rate";
  if (key == "samples_per_s") return "samples/s";
  return key;
}

// loss first, lr and samples/s last, the rest (validation metrics) between.
int PanelRank(const std::string& key) {
  if (key == "loss") return 0;
  if (key == "lr") return 2;
  if (key == "samples_per_s") return 3;
  return 1;
}

Status CheckSeries(const SeriesMap& series) {
  if (series.empty()) return InvalidArgumentError("no scalars to plot");
  for (const auto& [tag, points] : series) {
    if (points.empty()) {
      return InvalidArgumentError("scalar series '" + tag + "' is empty");
    }
    for (const ScalarPoint& p : points) {
      if (!std::isfinite(p.value)) {
        char text[32];
        std::snprintf(text, sizeof(text), "%g", p.value);
        return InvalidArgumentError("scalar '" + tag + "' at step " +
                                    std::to_string(p.step) + " is " + text);
      }
    }
  }
  return Status::Ok();
}

std::vector<ScalarPoint> SortedByStep(std::vector<ScalarPoint> points) {
  std::stable_sort(points.begin(), points.end(),
                   [](const ScalarPoint& a, const ScalarPoint& b) {
                     return a.step < b.step;
                   });
  return points;
}

// The legend goes into the corner of the plot area that covers the fewest
// points of the curves (sampled along each segment), top right on a tie.
// At most two points per pixel column (the lowest and the highest value in
// it, in step order): the same picture as every point, and a 100k-step
// series draws in milliseconds instead of seconds.
std::vector<ScalarPoint> Decimate(const std::vector<ScalarPoint>& sorted,
                                  const AxisBox& box) {
  const size_t columns = static_cast<size_t>(box.right - box.left) + 1;
  if (sorted.size() <= 4 * columns) return sorted;
  std::vector<ScalarPoint> out;
  size_t i = 0;
  while (i < sorted.size()) {
    const int64_t column = std::llround(box.X(sorted[i].step) - box.left);
    size_t lo = i, hi = i, j = i;
    for (; j < sorted.size() &&
           std::llround(box.X(sorted[j].step) - box.left) == column;
         ++j) {
      if (sorted[j].value < sorted[lo].value) lo = j;
      if (sorted[j].value > sorted[hi].value) hi = j;
    }
    out.push_back(sorted[std::min(lo, hi)]);
    if (lo != hi) out.push_back(sorted[std::max(lo, hi)]);
    i = j;
  }
  return out;
}

void DrawLegend(Canvas* canvas, const AxisBox& box,
                const std::vector<std::string>& tags,
                const std::vector<std::vector<ScalarPoint>>& curves) {
  constexpr double kFont = 12, kRow = 17, kSwatch = 18, kPad = 6;
  double widest = 0;
  for (const std::string& t : tags) {
    widest = std::max(widest, canvas->TextWidth(t, kFont));
  }
  const double w = kPad * 3 + kSwatch + widest;
  const double h = kPad * 2 + kRow * tags.size() - 4;
  const double corners[4][2] = {{box.right - w - 8, box.top + 8},
                                {box.left + 8, box.top + 8},
                                {box.right - w - 8, box.bottom - h - 8},
                                {box.left + 8, box.bottom - h - 8}};
  int best = 0;
  int64_t best_covered = INT64_MAX;
  for (int c = 0; c < 4; ++c) {
    int64_t covered = 0;
    auto count = [&](double px, double py) {
      covered += px >= corners[c][0] - 4 && px <= corners[c][0] + w + 4 &&
                 py >= corners[c][1] - 4 && py <= corners[c][1] + h + 4;
    };
    for (const std::vector<ScalarPoint>& points : curves) {
      for (size_t k = 0; k < points.size(); ++k) {
        const double x1 = box.X(points[k].step), y1 = box.Y(points[k].value);
        count(x1, y1);
        if (k == 0) continue;
        const double x0 = box.X(points[k - 1].step);
        const double y0 = box.Y(points[k - 1].value);
        for (int t = 1; t < 8; ++t) {
          count(x0 + (x1 - x0) * t / 8, y0 + (y1 - y0) * t / 8);
        }
      }
    }
    if (covered < best_covered) {
      best = c;
      best_covered = covered;
    }
  }
  const double x = corners[best][0], y = corners[best][1];
  cairo_t* cr = canvas->cr();
  canvas->SetColor({1, 1, 1}, 0.85);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill_preserve(cr);
  canvas->SetColor({0.7, 0.7, 0.7});
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (size_t i = 0; i < tags.size(); ++i) {
    const double row_y = y + kPad + kRow * i + 7;
    canvas->SetColor(PaletteColor(static_cast<int>(i)));
    cairo_set_line_width(cr, 2.5);
    cairo_move_to(cr, x + kPad, row_y);
    cairo_line_to(cr, x + kPad + kSwatch, row_y);
    cairo_stroke(cr);
    canvas->SetColor({0.15, 0.15, 0.15});
    canvas->Text(x + kPad * 2 + kSwatch, row_y + 4, tags[i], kFont);
  }
}

void DrawPanel(Canvas* canvas, const CurvePanel& panel, const SeriesMap& series,
               const std::vector<double>& x_ticks, double x0, double y0) {
  double lo = INFINITY, hi = -INFINITY;
  for (const std::string& tag : panel.tags) {
    for (const ScalarPoint& p : series.at(tag)) {
      lo = std::min(lo, p.value);
      hi = std::max(hi, p.value);
    }
  }
  const std::vector<double> y_ticks = NiceTicks(lo, hi, 5);
  AxisBox box;
  box.left = x0 + 90;
  box.right = x0 + kCurvePanelWidth - 24;
  box.top = y0 + 34;
  box.bottom = y0 + kCurvePanelHeight - 52;
  box.x_min = x_ticks.front();
  box.x_max = x_ticks.back();
  box.y_min = y_ticks.front();
  box.y_max = y_ticks.back();

  canvas->SetColor({0.1, 0.1, 0.1});
  canvas->Text((box.left + box.right) / 2, y0 + 22, panel.title, 15,
               Canvas::Align::kCenter, /*bold=*/true);
  DrawAxes(canvas, box, x_ticks, y_ticks, "step", panel.title);

  cairo_t* cr = canvas->cr();
  cairo_save(cr);
  // A little beyond the frame: markers on the axis range's edge stay whole.
  cairo_rectangle(cr, box.left - 5, box.top - 5, box.right - box.left + 10,
                  box.bottom - box.top + 10);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  std::vector<std::vector<ScalarPoint>> curves;
  for (const std::string& tag : panel.tags) {
    curves.push_back(Decimate(SortedByStep(series.at(tag)), box));
  }
  for (size_t i = 0; i < curves.size(); ++i) {
    const std::vector<ScalarPoint>& points = curves[i];
    const bool markers = points.size() <= kMarkerMaxPoints;
    canvas->SetColor(PaletteColor(static_cast<int>(i)));
    cairo_set_line_width(cr, markers ? 2.0 : 1.3);
    for (size_t k = 0; k < points.size(); ++k) {
      const double px = box.X(points[k].step), py = box.Y(points[k].value);
      k == 0 ? cairo_move_to(cr, px, py) : cairo_line_to(cr, px, py);
    }
    cairo_stroke(cr);
    if (markers) {
      for (const ScalarPoint& p : points) {
        cairo_arc(cr, box.X(p.step), box.Y(p.value), 3.5, 0, 2 * M_PI);
        cairo_fill(cr);
      }
    }
  }
  cairo_restore(cr);
  DrawLegend(canvas, box, panel.tags, curves);
}

}  // namespace

std::vector<CurvePanel> GroupCurvePanels(const SeriesMap& series) {
  std::vector<CurvePanel> panels;
  for (const auto& [tag, points] : series) {
    const std::string key = FamilyOf(tag).key;
    auto it = std::find_if(panels.begin(), panels.end(),
                           [&](const CurvePanel& p) { return p.key == key; });
    if (it == panels.end()) {
      panels.push_back({key, PanelTitle(key), {}});
      it = panels.end() - 1;
    }
    it->tags.push_back(tag);
  }
  for (CurvePanel& p : panels) {
    auto order = [](const std::string& tag) {
      const size_t slash = tag.rfind('/');
      return std::make_tuple(
          slash == std::string::npos ? std::string() : tag.substr(0, slash),
          FamilyOf(tag).per_epoch, tag);
    };
    std::sort(p.tags.begin(), p.tags.end(),
              [&](const std::string& a, const std::string& b) {
                return order(a) < order(b);
              });
  }
  std::stable_sort(panels.begin(), panels.end(),
                   [](const CurvePanel& a, const CurvePanel& b) {
                     return std::make_pair(PanelRank(a.key), a.key) <
                            std::make_pair(PanelRank(b.key), b.key);
                   });
  return panels;
}

StatusOr<RasterImage> PlotTrainingCurves(const std::string& title,
                                         const SeriesMap& series) {
  DDP_RETURN_IF_ERROR(CheckSeries(series));
  const std::vector<CurvePanel> panels = GroupCurvePanels(series);
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& [tag, points] : series) {
    for (const ScalarPoint& p : points) {
      first = std::min(first, p.step);
      last = std::max(last, p.step);
    }
  }
  // At least 5 steps wide, so that tick spacing stays >= 1 step.
  const std::vector<double> x_ticks =
      NiceTicks(static_cast<double>(first),
                static_cast<double>(std::max(last, first + 5)), 6);

  DDP_ASSIGN_OR_RETURN(
      std::unique_ptr<Canvas> canvas,
      Canvas::Create(kCurvePlotWidth,
                     CurvePlotHeight(static_cast<int>(panels.size()))));
  canvas->SetColor({0.05, 0.05, 0.05});
  const auto [text, size] =
      canvas->FitText(title, kCurvePlotWidth - 20, 22, /*bold=*/true);
  canvas->Text(kCurvePlotWidth / 2.0, 36, text, size, Canvas::Align::kCenter,
               /*bold=*/true);
  for (size_t i = 0; i < panels.size(); ++i) {
    DrawPanel(canvas.get(), panels[i], series, x_ticks,
              (i % 2) * kCurvePanelWidth,
              kCurveTitleHeight + (i / 2) * kCurvePanelHeight);
  }
  return canvas->ToRaster();
}

}  // namespace ddprun::examples::outputs
