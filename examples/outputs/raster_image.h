#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

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

// PNG bytes: 8-bit gray or RGB, zlib at its fastest level (the trainers
// encode a picture at every validation, on rank 0 only).
StatusOr<std::string> EncodePng(const RasterImage& image);

// common/file_util.h's WriteFileAtomically without its fsyncs: a reader
// never sees half a file, an old one is replaced whole, errors name the
// path; a picture lost to a power cut is drawn again at the next
// validation, and rank 0 would pay the sync inside every validation.
Status ReplaceFile(const std::string& path, const std::string& bytes);

// EncodePng(image) written with ReplaceFile.
Status WritePng(const std::string& path, const RasterImage& image);

}  // namespace ddprun::examples::outputs
