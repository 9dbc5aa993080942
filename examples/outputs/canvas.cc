#include "examples/outputs/canvas.h"

#include <algorithm>
#include <array>

namespace ddprun::examples::outputs {

Rgb PaletteColor(int i) {
  static constexpr std::array<std::array<int, 3>, 10> kTab10 = {{
      {31, 119, 180},
      {255, 127, 14},
      {44, 160, 44},
      {214, 39, 40},
      {148, 103, 189},
      {140, 86, 75},
      {227, 119, 194},
      {127, 127, 127},
      {188, 189, 34},
      {23, 190, 207},
  }};
  const auto& c = kTab10[static_cast<size_t>(i < 0 ? -i : i) % kTab10.size()];
  return {c[0] / 255.0, c[1] / 255.0, c[2] / 255.0};
}

StatusOr<std::unique_ptr<Canvas>> Canvas::Create(int width, int height) {
  if (width < 1 || height < 1 || width > 16384 || height > 16384) {
    return InvalidArgumentError("canvas size " + std::to_string(width) + "x" +
                                std::to_string(height) +
                                " is outside 1..16384");
  }
  cairo_surface_t* surface =
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
  if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS) {
    const std::string why =
        cairo_status_to_string(cairo_surface_status(surface));
    cairo_surface_destroy(surface);
    return InternalError("cairo cannot create a " + std::to_string(width) +
                         "x" + std::to_string(height) + " image: " + why);
  }
  cairo_t* cr = cairo_create(surface);
  std::unique_ptr<Canvas> canvas(new Canvas(surface, cr, width, height));
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  return canvas;
}

Canvas::~Canvas() {
  cairo_destroy(cr_);
  cairo_surface_destroy(surface_);
}

void Canvas::SetColor(const Rgb& c, double alpha) {
  cairo_set_source_rgba(cr_, c.r, c.g, c.b, alpha);
}

void Canvas::SelectFont(double size, bool bold) {
  cairo_select_font_face(
      cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
      bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr_, size);
}

double Canvas::TextWidth(const std::string& text, double size, bool bold) {
  SelectFont(size, bold);
  cairo_text_extents_t ext;
  cairo_text_extents(cr_, text.c_str(), &ext);
  return ext.x_advance;
}

std::pair<std::string, double> Canvas::FitText(const std::string& text,
                                               double max_width, double size,
                                               bool bold) {
  const double smallest = std::max(9.0, size * 0.7);
  double s = size;
  while (s > smallest && TextWidth(text, s, bold) > max_width) s -= 0.5;
  if (TextWidth(text, s, bold) <= max_width) return {text, s};
  std::string cut = text;
  while (!cut.empty() && TextWidth(cut + "...", s, bold) > max_width) {
    cut.pop_back();
  }
  return {cut + "...", s};
}

void Canvas::Text(double x, double y, const std::string& text, double size,
                  Align align, bool bold, double angle) {
  const double w = TextWidth(text, size, bold);
  const double shift = align == Align::kLeft     ? 0
                       : align == Align::kCenter ? w / 2
                                                 : w;
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  cairo_rotate(cr_, angle);
  cairo_move_to(cr_, -shift, 0);
  cairo_show_text(cr_, text.c_str());
  cairo_restore(cr_);
}

void Canvas::PaintPixels(const std::vector<uint32_t>& argb, int width,
                         int height, double x, double y, double scale) {
  cairo_surface_t* img =
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
  if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(img);
    return;  // the error shows as missing pixels; ToRaster() still works
  }
  cairo_surface_flush(img);
  unsigned char* data = cairo_image_surface_get_data(img);
  const int stride = cairo_image_surface_get_stride(img);
  for (int row = 0; row < height; ++row) {
    auto* dst = reinterpret_cast<uint32_t*>(data + row * stride);
    for (int col = 0; col < width; ++col) {
      dst[col] = argb[static_cast<size_t>(row) * width + col];
    }
  }
  cairo_surface_mark_dirty(img);
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  cairo_scale(cr_, scale, scale);
  cairo_set_source_surface(cr_, img, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr_), CAIRO_FILTER_NEAREST);
  cairo_rectangle(cr_, 0, 0, width, height);
  cairo_fill(cr_);
  cairo_restore(cr_);
  cairo_surface_destroy(img);
}

StatusOr<RasterImage> Canvas::ToRaster() const {
  if (cairo_status(cr_) != CAIRO_STATUS_SUCCESS) {
    return InternalError(std::string("drawing failed: ") +
                         cairo_status_to_string(cairo_status(cr_)));
  }
  cairo_surface_flush(surface_);
  const unsigned char* data = cairo_image_surface_get_data(surface_);
  const int stride = cairo_image_surface_get_stride(surface_);
  RasterImage out;
  out.width = width_;
  out.height = height_;
  out.channels = 3;
  out.pixels.resize(static_cast<size_t>(width_) * height_ * 3);
  uint8_t* dst = out.pixels.data();
  for (int row = 0; row < height_; ++row) {
    const auto* src = reinterpret_cast<const uint32_t*>(data + row * stride);
    for (int col = 0; col < width_; ++col) {
      const uint32_t px = src[col];  // RGB24: 0x00RRGGBB in native order
      *dst++ = static_cast<uint8_t>(px >> 16);
      *dst++ = static_cast<uint8_t>(px >> 8);
      *dst++ = static_cast<uint8_t>(px);
    }
  }
  return out;
}

}  // namespace ddprun::examples::outputs
