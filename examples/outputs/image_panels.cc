#include "examples/outputs/image_panels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "examples/outputs/canvas.h"

namespace ddprun::examples::outputs {
namespace {

constexpr int kGap = 8;
constexpr int kLabelBand = 20;
constexpr int kTitleBand = 32;
constexpr int kMinTitledWidth = 400;
constexpr Rgb kPredicted{214 / 255.0, 39 / 255.0, 40 / 255.0};
constexpr Rgb kTruth{44 / 255.0, 200 / 255.0, 44 / 255.0};
constexpr double kPredictedAlpha = 0.45;

Status CheckSlice(const FloatSlice& s, const std::string& what) {
  if (s.height < 1 || s.width < 1) {
    return InvalidArgumentError(what + " is empty (" +
                                std::to_string(s.height) + "x" +
                                std::to_string(s.width) + ")");
  }
  if (s.values.size() != static_cast<size_t>(s.height) * s.width) {
    return InvalidArgumentError(
        what + " has " + std::to_string(s.values.size()) + " values for " +
        std::to_string(s.height) + "x" + std::to_string(s.width));
  }
  for (size_t i = 0; i < s.values.size(); ++i) {
    if (!std::isfinite(s.values[i])) {
      return InvalidArgumentError(what + " has a non-finite value at row " +
                                  std::to_string(i / s.width) + ", column " +
                                  std::to_string(i % s.width));
    }
  }
  return Status::Ok();
}

Status CheckSameSize(const FloatSlice& s, const FloatSlice& first,
                     const std::string& what) {
  if (s.height != first.height || s.width != first.width) {
    return InvalidArgumentError(what + " is " + std::to_string(s.height) + "x" +
                                std::to_string(s.width) + ", the first slice " +
                                std::to_string(first.height) + "x" +
                                std::to_string(first.width));
  }
  return Status::Ok();
}

std::string SliceName(size_t i, const FloatSlice& s) {
  return "slice " + std::to_string(i) +
         (s.label.empty() ? "" : " ('" + s.label + "')");
}

// Gray levels of `s` with `lo`..`hi` mapped to black..white.
std::vector<uint32_t> GrayPixels(const FloatSlice& s, float lo, float hi) {
  std::vector<uint32_t> px(s.values.size());
  for (size_t i = 0; i < px.size(); ++i) {
    const float t = hi > lo ? (s.values[i] - lo) / (hi - lo) : 0.5f;
    px[i] = OpaqueGray(
        static_cast<uint8_t>(std::lround(std::clamp(t, 0.0f, 1.0f) * 255.0f)));
  }
  return px;
}

std::pair<float, float> Range(const FloatSlice& s) {
  const auto [lo, hi] = std::minmax_element(s.values.begin(), s.values.end());
  return {*lo, *hi};
}

struct Frame {
  std::unique_ptr<Canvas> canvas;
  GridGeometry geo;
  // Top-left corner of tile i.
  std::pair<int, int> Tile(size_t i, bool titled) const {
    const int col = static_cast<int>(i) % geo.columns;
    const int row = static_cast<int>(i) / geo.columns;
    return {kGap + col * (geo.tile_width + kGap),
            (titled ? kTitleBand : 0) + kGap + kLabelBand +
                row * (kLabelBand + geo.tile_height + kGap)};
  }
};

StatusOr<Frame> MakeFrame(size_t count, const FloatSlice& first,
                          const GridOptions& options, bool titled,
                          const std::string& title) {
  if (options.min_tile < 1) {
    return InvalidArgumentError("min_tile must be >= 1, got " +
                                std::to_string(options.min_tile));
  }
  GridOptions o = options;
  o.title = titled ? title : "";
  Frame f;
  f.geo = ComputeGridGeometry(static_cast<int>(count), first.height,
                              first.width, o);
  DDP_ASSIGN_OR_RETURN(f.canvas, Canvas::Create(f.geo.width, f.geo.height));
  if (titled) {
    f.canvas->SetColor({0.05, 0.05, 0.05});
    const auto [text, size] =
        f.canvas->FitText(title, f.geo.width - 2 * kGap, 15, /*bold=*/true);
    f.canvas->Text(kGap, 22, text, size, Canvas::Align::kLeft, true);
  }
  return f;
}

void Label(Canvas* canvas, int x, int y, int width, const std::string& text) {
  if (text.empty()) return;
  canvas->SetColor({0.1, 0.1, 0.1});
  const auto [fitted, size] = canvas->FitText(text, width, 12);
  canvas->Text(x + width / 2.0, y - 6, fitted, size, Canvas::Align::kCenter);
}

}  // namespace

GridGeometry ComputeGridGeometry(int count, int slice_height, int slice_width,
                                 const GridOptions& options) {
  GridGeometry g;
  g.scale = std::max(1, options.min_tile / std::max(slice_height, slice_width));
  g.tile_width = g.scale * slice_width;
  g.tile_height = g.scale * slice_height;
  g.columns = options.columns > 0 ? std::min(options.columns, count) : count;
  g.columns = std::max(g.columns, 1);
  g.rows = (count + g.columns - 1) / g.columns;
  g.width = g.columns * (g.tile_width + kGap) + kGap;
  if (!options.title.empty()) g.width = std::max(g.width, kMinTitledWidth);
  g.height = (options.title.empty() ? 0 : kTitleBand) +
             g.rows * (kLabelBand + g.tile_height + kGap) + kGap;
  return g;
}

StatusOr<RasterImage> SliceGrid(const std::vector<FloatSlice>& slices,
                                const GridOptions& options) {
  if (slices.empty()) return InvalidArgumentError("no slices to show");
  for (size_t i = 0; i < slices.size(); ++i) {
    DDP_RETURN_IF_ERROR(CheckSlice(slices[i], SliceName(i, slices[i])));
    DDP_RETURN_IF_ERROR(
        CheckSameSize(slices[i], slices[0], SliceName(i, slices[i])));
  }
  const bool titled = !options.title.empty();
  DDP_ASSIGN_OR_RETURN(Frame f, MakeFrame(slices.size(), slices[0], options,
                                          titled, options.title));
  std::pair<float, float> shared = Range(slices[0]);
  for (const FloatSlice& s : slices) {
    const auto [lo, hi] = Range(s);
    shared = {std::min(shared.first, lo), std::max(shared.second, hi)};
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const auto [lo, hi] = options.shared_range ? shared : Range(slices[i]);
    const auto [x, y] = f.Tile(i, titled);
    f.canvas->PaintPixels(GrayPixels(slices[i], lo, hi), slices[i].width,
                          slices[i].height, x, y, f.geo.scale);
    Label(f.canvas.get(), x, y, f.geo.tile_width, slices[i].label);
  }
  return f.canvas->ToRaster();
}

StatusOr<RasterImage> MaskOverlayGrid(const std::vector<OverlayCase>& cases,
                                      const GridOptions& options) {
  if (cases.empty()) return InvalidArgumentError("no cases to show");
  const FloatSlice& first = cases[0].image;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "case " + std::to_string(i);
    const std::pair<const FloatSlice*, const char*> parts[] = {
        {&cases[i].image, " image"},
        {&cases[i].predicted, " predicted mask"},
        {&cases[i].truth, " true mask"}};
    for (const auto& [slice, what] : parts) {
      DDP_RETURN_IF_ERROR(CheckSlice(*slice, name + what));
      DDP_RETURN_IF_ERROR(CheckSameSize(*slice, first, name + what));
    }
  }
  const std::string legend = "red: predicted, green: truth outline";
  const std::string title =
      options.title.empty() ? legend : options.title + "  (" + legend + ")";
  DDP_ASSIGN_OR_RETURN(Frame f,
                       MakeFrame(cases.size(), first, options, true, title));
  cairo_t* cr = f.canvas->cr();
  const int w = first.width, h = first.height;
  const double s = f.geo.scale;
  for (size_t i = 0; i < cases.size(); ++i) {
    const OverlayCase& c = cases[i];
    const auto [x, y] = f.Tile(i, true);
    const auto [lo, hi] = Range(c.image);
    f.canvas->PaintPixels(GrayPixels(c.image, lo, hi), w, h, x, y, s);

    // Premultiplied translucent red where the prediction is inside.
    std::vector<uint32_t> red(c.predicted.values.size(), 0);
    const auto a = static_cast<uint32_t>(std::lround(kPredictedAlpha * 255));
    const auto premul = [a](double v) {
      return static_cast<uint32_t>(std::lround(v * a));
    };
    const uint32_t fill = (a << 24) | (premul(kPredicted.r) << 16) |
                          (premul(kPredicted.g) << 8) | premul(kPredicted.b);
    for (size_t k = 0; k < red.size(); ++k) {
      if (c.predicted.values[k] > 0.5f) red[k] = fill;
    }
    f.canvas->PaintPixels(red, w, h, x, y, s);

    // The true mask's outline: every pixel edge between inside and outside
    // (clipped to the tile: the line is 2 px wide, centred on the edge).
    cairo_save(cr);
    cairo_rectangle(cr, x, y, f.geo.tile_width, f.geo.tile_height);
    cairo_clip(cr);
    auto inside = [&](int row, int col) {
      return row >= 0 && col >= 0 && row < h && col < w &&
             c.truth.values[static_cast<size_t>(row) * w + col] > 0.5f;
    };
    for (int row = 0; row < h; ++row) {
      for (int col = 0; col < w; ++col) {
        if (!inside(row, col)) continue;
        const double x0 = x + col * s, y0 = y + row * s;
        if (!inside(row - 1, col)) {
          cairo_move_to(cr, x0, y0);
          cairo_line_to(cr, x0 + s, y0);
        }
        if (!inside(row + 1, col)) {
          cairo_move_to(cr, x0, y0 + s);
          cairo_line_to(cr, x0 + s, y0 + s);
        }
        if (!inside(row, col - 1)) {
          cairo_move_to(cr, x0, y0);
          cairo_line_to(cr, x0, y0 + s);
        }
        if (!inside(row, col + 1)) {
          cairo_move_to(cr, x0 + s, y0);
          cairo_line_to(cr, x0 + s, y0 + s);
        }
      }
    }
    f.canvas->SetColor(kTruth);
    cairo_set_line_width(cr, 2);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_SQUARE);
    cairo_stroke(cr);
    cairo_restore(cr);
    Label(f.canvas.get(), x, y, f.geo.tile_width, c.image.label);
  }
  return f.canvas->ToRaster();
}

}  // namespace ddprun::examples::outputs
