#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/outputs/raster_image.h"

namespace ddprun::examples::outputs::testing {

// A PNG decoded by stb_image (independently of the encoder), as RGB.
struct Decoded {
  bool ok = false;
  std::string error;  // stb's reason when !ok
  int width = 0, height = 0;
  int file_channels = 0;  // what the file holds (1 gray, 3 RGB, ...)
  std::vector<uint8_t> rgb;

  const uint8_t* At(int x, int y) const {
    return &rgb[(static_cast<size_t>(y) * width + x) * 3];
  }
  // Pixels in [x0, x1) x [y0, y1) within `tol` of (r, g, b) per channel.
  int64_t Count(int r, int g, int b, int tol, int x0, int y0, int x1,
                int y1) const;
  int64_t Count(int r, int g, int b, int tol) const {
    return Count(r, g, b, tol, 0, 0, width, height);
  }
  // Pixels that are not (near) white.
  int64_t NonWhite() const;
};

Decoded DecodePngFile(const std::string& path);
Decoded DecodePngBytes(const std::string& bytes);
// EncodePng(image) decoded (!ok with the encoder's error when it fails).
Decoded DecodeRaster(const RasterImage& image);

}  // namespace ddprun::examples::outputs::testing
