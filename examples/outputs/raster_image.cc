#include "examples/outputs/raster_image.h"

#include <errno.h>
#include <stdio.h>

#include <fstream>

#include <stb_image_write.h>

namespace ddprun::examples::outputs {

Status CheckRaster(const RasterImage& image) {
  constexpr int kMaxSide = 16384;
  if (image.channels != 1 && image.channels != 3) {
    return InvalidArgumentError("image has " + std::to_string(image.channels) +
                                " channels; expected 1 (gray) or 3 (RGB)");
  }
  if (image.width < 1 || image.height < 1 || image.width > kMaxSide ||
      image.height > kMaxSide) {
    return InvalidArgumentError("image size " + std::to_string(image.width) +
                                "x" + std::to_string(image.height) +
                                " is outside 1..16384");
  }
  const size_t expected = static_cast<size_t>(image.width) * image.height *
                          static_cast<size_t>(image.channels);
  if (image.pixels.size() != expected) {
    return InvalidArgumentError("image of " + std::to_string(image.width) +
                                "x" + std::to_string(image.height) + "x" +
                                std::to_string(image.channels) + " needs " +
                                std::to_string(expected) + " bytes, has " +
                                std::to_string(image.pixels.size()));
  }
  return Status::Ok();
}

StatusOr<std::string> EncodePng(const RasterImage& image) {
  DDP_RETURN_IF_ERROR(CheckRaster(image));
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                               size);
  };
  if (!stbi_write_png_to_func(append, &png, image.width, image.height,
                              image.channels, image.pixels.data(),
                              image.width * image.channels)) {
    return InternalError("cannot encode a " + std::to_string(image.width) +
                         "x" + std::to_string(image.height) + " PNG");
  }
  return png;
}

Status WritePng(const std::string& path, const RasterImage& image) {
  DDP_ASSIGN_OR_RETURN(const std::string png, EncodePng(image));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoStatus("cannot write " + path, errno);
    out.write(png.data(), static_cast<std::streamsize>(png.size()));
    out.flush();
    if (!out) {
      const int err = errno;
      ::remove(tmp.c_str());
      return ErrnoStatus("cannot write " + path, err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::remove(tmp.c_str());
    return ErrnoStatus("cannot write " + path, err);
  }
  return Status::Ok();
}

}  // namespace ddprun::examples::outputs
