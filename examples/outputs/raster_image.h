#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status_or.h"

namespace ddprun::examples::outputs {

// An 8-bit image in memory: rows top to bottom, channels interleaved
// (1 = gray, 3 = RGB).
struct RasterImage {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels bytes
};

// INVALID_ARGUMENT unless channels is 1 or 3, width and height are in
// [1, 16384] and `pixels` has exactly height * width * channels bytes.
Status CheckRaster(const RasterImage& image);

// PNG bytes (stb_image_write).
StatusOr<std::string> EncodePng(const RasterImage& image);

// Writes the PNG to `path` through a temporary file renamed into place, so
// a reader never sees half an image and an old image is replaced whole.
// Errors name the path.
Status WritePng(const std::string& path, const RasterImage& image);

}  // namespace ddprun::examples::outputs
