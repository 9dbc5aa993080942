#include "examples/frame/image_io.h"

#include <filesystem>
#include <memory>

#include <torch/nn/functional/upsampling.h>

#include <stb_image.h>
#include <stb_image_write.h>

#include "examples/formats/media_limits.h"

namespace ddprun::examples {

StatusOr<torch::Tensor> ReadGrayImage(const std::string& path, int64_t size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("image file not found: " + path);
  }
  // The header first: nothing is decoded beyond the size limit.
  DDP_ASSIGN_OR_RETURN(ImageSize declared, ReadImageSize(path));
  DDP_RETURN_IF_ERROR(CheckImagePixels(path, declared.width, declared.height));
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<unsigned char, void (*)(void*)> pixels(
      stbi_load(path.c_str(), &w, &h, &channels, /*desired_channels=*/1),
      stbi_image_free);
  if (!pixels) {
    return InvalidArgumentError(path + ": cannot decode image (" +
                                std::string(stbi_failure_reason()) + ")");
  }
  torch::Tensor t = torch::from_blob(pixels.get(), {1, h, w}, torch::kUInt8)
                        .to(torch::kFloat32)
                        .div(255.0);
  if (size > 0 && (h != size || w != size)) {
    namespace F = torch::nn::functional;
    t = F::interpolate(t.unsqueeze(0),
                       F::InterpolateFuncOptions()
                           .size(std::vector<int64_t>{size, size})
                           .mode(torch::kBilinear)
                           .align_corners(false))
            .squeeze(0);
  }
  return t.contiguous();
}

namespace {

// `image` ([H, W] or [1, H, W], values in [0, 1]) as contiguous uint8 [H, W].
StatusOr<torch::Tensor> GrayBytes(const std::string& path,
                                  const torch::Tensor& image) {
  torch::Tensor t = image.detach().to(torch::kCPU, torch::kFloat32);
  if (t.dim() == 3) t = t.squeeze(0);
  if (t.dim() != 2)
    return InvalidArgumentError("writing image " + path + ": expected [H,W]");
  return t.clamp(0, 1).mul(255.0).round().to(torch::kUInt8).contiguous();
}

}  // namespace

Status WriteGrayPng(const std::string& path, const torch::Tensor& image) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor bytes, GrayBytes(path, image));
  const int h = static_cast<int>(bytes.size(0)),
            w = static_cast<int>(bytes.size(1));
  if (!stbi_write_png(path.c_str(), w, h, 1, bytes.data_ptr<uint8_t>(), w)) {
    return InternalError("cannot write PNG " + path);
  }
  return Status::Ok();
}

Status WriteGrayJpeg(const std::string& path, const torch::Tensor& image,
                     int quality) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor bytes, GrayBytes(path, image));
  const int h = static_cast<int>(bytes.size(0)),
            w = static_cast<int>(bytes.size(1));
  if (!stbi_write_jpg(path.c_str(), w, h, 1, bytes.data_ptr<uint8_t>(),
                      quality)) {
    return InternalError("cannot write JPEG " + path);
  }
  return Status::Ok();
}

}  // namespace ddprun::examples
