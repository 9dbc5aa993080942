#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cairo.h>

#include "ddprun/common/status_or.h"
#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs {

struct Rgb {
  double r = 0, g = 0, b = 0;  // 0..1
};

// The i-th colour of the series palette (matplotlib's "tab10", cycling):
// 0 blue (31,119,180), 1 orange (255,127,14), 2 green (44,160,44), 3 red
// (214,39,40), ...
Rgb PaletteColor(int i);

// A white drawing surface: cairo does the drawing (antialiased lines,
// text through fontconfig, scaled pixel images), ToRaster() reads it back
// as RGB. Owns its cairo surface and context. Not thread-safe.
class Canvas {
 public:
  enum class Align { kLeft, kCenter, kRight };

  // INVALID_ARGUMENT for a size outside [1, 16384]; INTERNAL when cairo
  // cannot allocate the surface.
  static StatusOr<std::unique_ptr<Canvas>> Create(int width, int height);
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  cairo_t* cr() const { return cr_; }
  int width() const { return width_; }
  int height() const { return height_; }

  void SetColor(const Rgb& c, double alpha = 1.0);
  // Text with its baseline at y; `angle` in radians (-pi/2: reads upwards).
  void Text(double x, double y, const std::string& text, double size,
            Align align = Align::kLeft, bool bold = false, double angle = 0);
  double TextWidth(const std::string& text, double size, bool bold = false);
  // `text` and a font size that fit in `max_width` pixels: the size shrinks
  // down to 70% of `size` (at least 9), then the text is cut with "...".
  std::pair<std::string, double> FitText(const std::string& text,
                                         double max_width, double size,
                                         bool bold = false);
  // Paints premultiplied ARGB32 pixels (`width` x `height`, row-major) with
  // their top-left corner at (x, y), each pixel a `scale` x `scale` square
  // (nearest neighbour: data pixels stay visible as pixels).
  void PaintPixels(const std::vector<uint32_t>& argb, int width, int height,
                   double x, double y, double scale);

  // INTERNAL when cairo reports an error (e.g. out of memory mid-drawing).
  StatusOr<RasterImage> ToRaster() const;

 private:
  Canvas(cairo_surface_t* surface, cairo_t* cr, int width, int height)
      : surface_(surface), cr_(cr), width_(width), height_(height) {}
  void SelectFont(double size, bool bold);

  cairo_surface_t* surface_;
  cairo_t* cr_;
  int width_;
  int height_;
};

// Premultiplied ARGB32 pixel of an opaque gray level / colour.
inline uint32_t OpaqueGray(uint8_t v) {
  return 0xFF000000u | (uint32_t{v} << 16) | (uint32_t{v} << 8) | v;
}

}  // namespace ddprun::examples::outputs
