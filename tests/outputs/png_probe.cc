#include "tests/outputs/png_probe.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <stb_image.h>

namespace ddprun::examples::outputs::testing {

int64_t Decoded::Count(int r, int g, int b, int tol, int x0, int y0, int x1,
                       int y1) const {
  int64_t n = 0;
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      const uint8_t* p = At(x, y);
      if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol &&
          std::abs(p[2] - b) <= tol) {
        ++n;
      }
    }
  }
  return n;
}

int64_t Decoded::NonWhite() const {
  return static_cast<int64_t>(width) * height - Count(255, 255, 255, 8);
}

Decoded DecodePngBytes(const std::string& bytes) {
  Decoded d;
  int w = 0, h = 0, n = 0;
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  if (bytes.size() < 8 || std::string(bytes, 1, 3) != "PNG") {
    d.error = "not a PNG signature";
    return d;
  }
  stbi_uc* px = stbi_load_from_memory(data, static_cast<int>(bytes.size()), &w,
                                      &h, &n, 3);
  if (px == nullptr) {
    d.error = stbi_failure_reason();
    return d;
  }
  d.ok = true;
  d.width = w;
  d.height = h;
  d.file_channels = n;
  d.rgb.assign(px, px + static_cast<size_t>(w) * h * 3);
  stbi_image_free(px);
  return d;
}

Decoded DecodePngFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    Decoded d;
    d.error = "cannot open " + path;
    return d;
  }
  return DecodePngBytes(std::string((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>()));
}

Decoded DecodeRaster(const RasterImage& image) {
  auto png = EncodePng(image);
  if (!png.ok()) {
    Decoded d;
    d.error = png.status().message();
    return d;
  }
  return DecodePngBytes(*png);
}

}  // namespace ddprun::examples::outputs::testing
