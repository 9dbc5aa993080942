#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace ddprun::examples {

// What --amp / --mixed_precision resolve to on the world's device.
struct Precision {
  bool autocast = false;              // false: fp32
  at::ScalarType dtype = at::kFloat;  // kBFloat16 or kHalf when autocast
  bool loss_scaling = false;          // fp16: dynamic loss scaling
  // "fp32", "bf16 autocast" or "fp16 autocast with dynamic loss scaling".
  std::string description;
  // One line when the request could not be honoured as asked (fp16 on a
  // CPU whose autocast has no float16), else empty.
  std::string note;
};

// Resolves the two spellings: `amp` is --amp's value ("" when not given,
// "bf16", "fp16" or "no"; --amp alone is "bf16"), `mixed_precision` the
// guides' --mixed_precision ("" , "no", "bf16" or "fp16"). Both given and
// different is a ConfigError. bf16: autocast, no loss scaling. fp16:
// autocast in float16 with dynamic loss scaling (GradScaler) where this
// LibTorch's autocast has float16 on `device` (CUDA; CPU from LibTorch 2.2);
// on a CPU without it, bf16 autocast instead (no loss scaling needed) and
// `note` says so.
Precision ResolvePrecision(const std::string& amp,
                           const std::string& mixed_precision,
                           c10::Device device);

}  // namespace ddprun::examples
