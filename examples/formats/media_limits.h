#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// How large one decoded image or volume may be. Checked from the file's
// header before anything is decoded or allocated: a 389 KB PNG that declares
// 20000 x 20000 pixels would otherwise take gigabytes, and so would a tiny
// .nii.gz whose header declares a huge volume. The trainers set them from
// --max_image_pixels and --max_volume_voxels.
struct MediaLimits {
  // Pixels (width x height) of one image. Default 8192 x 8192 (64 Mi): a
  // chest X-ray is ~3000 x 2500.
  int64_t max_image_pixels = int64_t{8192} * 8192;
  // Voxels of one volume, every channel counted. Default 2^28 (256 Mi,
  // 1 GiB as float32): a 4-modality 240 x 240 x 155 BraTS case is ~36 Mi.
  int64_t max_volume_voxels = int64_t{1} << 28;
};

// The process-wide limits (thread-safe; data-loader threads read them).
MediaLimits GetMediaLimits();
void SetMediaLimits(const MediaLimits& limits);

// What an image file's header declares (stb_image's header parser; no
// pixel is decoded).
struct ImageSize {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 0;
};
// INVALID_ARGUMENT "<path>: cannot decode image (<reason>)" when the file
// has no image header stb_image knows.
StatusOr<ImageSize> ReadImageSize(const std::string& path);

// INVALID_ARGUMENT "<path>: image of WxH pixels is above the limit of N
// pixels (--max_image_pixels)" when width x height exceeds the limit.
Status CheckImagePixels(const std::string& path, int64_t width, int64_t height);

// `dims`: the volume's extents (each >= 1). INVALID_ARGUMENT naming the
// file when their product exceeds the limit (or would overflow).
Status CheckVolumeVoxels(const std::string& path,
                         const std::vector<int64_t>& dims);

}  // namespace ddprun::examples
