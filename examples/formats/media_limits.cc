#include "examples/formats/media_limits.h"

#include <atomic>

#include <stb_image.h>

namespace ddprun::examples {
namespace {

std::atomic<int64_t> g_max_image_pixels{MediaLimits().max_image_pixels};
std::atomic<int64_t> g_max_volume_voxels{MediaLimits().max_volume_voxels};

std::string Dims(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    s += (i ? "x" : "") + std::to_string(dims[i]);
  }
  return s;
}

}  // namespace

MediaLimits GetMediaLimits() {
  MediaLimits limits;
  limits.max_image_pixels = g_max_image_pixels.load();
  limits.max_volume_voxels = g_max_volume_voxels.load();
  return limits;
}

void SetMediaLimits(const MediaLimits& limits) {
  g_max_image_pixels = limits.max_image_pixels;
  g_max_volume_voxels = limits.max_volume_voxels;
}

StatusOr<ImageSize> ReadImageSize(const std::string& path) {
  int w = 0, h = 0, channels = 0;
  if (!stbi_info(path.c_str(), &w, &h, &channels)) {
    return InvalidArgumentError(path + ": cannot decode image (" +
                                std::string(stbi_failure_reason()) + ")");
  }
  return ImageSize{w, h, channels};
}

Status CheckImagePixels(const std::string& path, int64_t width,
                        int64_t height) {
  const int64_t limit = g_max_image_pixels.load();
  if (width > 0 && height > 0 && width <= limit / height) return Status::Ok();
  if (width <= 0 || height <= 0) {
    return InvalidArgumentError(path + ": image declares " +
                                std::to_string(width) + "x" +
                                std::to_string(height) + " pixels");
  }
  return InvalidArgumentError(
      path + ": image of " + std::to_string(width) + "x" +
      std::to_string(height) + " pixels is above the limit of " +
      std::to_string(limit) + " pixels (--max_image_pixels)");
}

Status CheckVolumeVoxels(const std::string& path,
                         const std::vector<int64_t>& dims) {
  const int64_t limit = g_max_volume_voxels.load();
  int64_t voxels = 1;
  bool over = false;
  for (int64_t d : dims) {
    if (d < 1) {
      return InvalidArgumentError(path + ": volume declares dimensions " +
                                  Dims(dims));
    }
    // voxels * d > limit, without overflowing.
    over = over || d > limit / voxels;
    if (!over) voxels *= d;
  }
  if (!over) return Status::Ok();
  return InvalidArgumentError(
      path + ": volume of " + Dims(dims) + " voxels is above the limit of " +
      std::to_string(limit) + " voxels (--max_volume_voxels)");
}

}  // namespace ddprun::examples
