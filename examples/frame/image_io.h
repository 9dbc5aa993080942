#pragma once

#include <string>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// Reads a PNG or JPEG (anything stb_image decodes) as a grayscale float32
// tensor [1, H, W] in [0, 1]. When `size` > 0 the image is resized
// (bilinear) to size x size. Errors: NOT_FOUND for a missing file;
// INVALID_ARGUMENT "<path>: cannot decode image (<stb reason>)" for a
// truncated or non-image file, and (before decoding anything) for an image
// above GetMediaLimits().max_image_pixels.
StatusOr<torch::Tensor> ReadGrayImage(const std::string& path, int64_t size);

// Writes `image` ([H, W] or [1, H, W], values in [0, 1]) as an 8-bit
// grayscale PNG. INTERNAL naming the file on failure.
Status WriteGrayPng(const std::string& path, const torch::Tensor& image);

// The same as an 8-bit grayscale baseline JPEG of `quality` (1-100); lossy,
// so ReadGrayImage gives back values within a few levels of 255.
Status WriteGrayJpeg(const std::string& path, const torch::Tensor& image,
                     int quality = 95);

}  // namespace ddprun::examples
