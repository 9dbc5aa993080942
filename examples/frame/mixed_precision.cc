#include "examples/frame/mixed_precision.h"

#include "ddprun/worker/errors.h"
#include "ddprun/worker/precision.h"

namespace ddprun::examples {

Precision ResolvePrecision(const std::string& amp,
                           const std::string& mixed_precision,
                           c10::Device device) {
  if (!amp.empty() && !mixed_precision.empty() && amp != mixed_precision) {
    throw worker::ConfigError("--amp " + amp + " and --mixed_precision " +
                              mixed_precision + " disagree; give one of them");
  }
  const std::string want = amp.empty() ? mixed_precision : amp;
  Precision p;
  if (want.empty() || want == "no") {
    p.description = "fp32";
    return p;
  }
  if (want != "bf16" && want != "fp16") {
    throw worker::ConfigError("mixed precision must be no, bf16 or fp16, got " +
                              want);
  }
  p.autocast = true;
  if (want == "fp16" && worker::AutocastSupported(device, at::kHalf)) {
    p.dtype = at::kHalf;
    p.loss_scaling = true;
    p.description = "fp16 autocast with dynamic loss scaling";
    return p;
  }
  if (want == "fp16") {
    p.note =
        "fp16: this LibTorch's CPU autocast computes in bfloat16 only "
        "(float16 needs LibTorch >= 2.2); training with bf16 autocast "
        "instead, which needs no loss scaling";
  }
  if (!worker::AutocastSupported(device, at::kBFloat16) &&
      worker::AutocastSupported(device, at::kHalf)) {
    // A GPU before Ampere (compute capability < 8.0) has no bfloat16 units.
    p.dtype = at::kHalf;
    p.loss_scaling = true;
    p.description = "fp16 autocast with dynamic loss scaling";
    p.note = want +
             ": this GPU has no bfloat16 (compute capability < 8.0); training "
             "with fp16 autocast and dynamic loss scaling instead";
    return p;
  }
  p.dtype = at::kBFloat16;
  p.description = "bf16 autocast";
  return p;
}

}  // namespace ddprun::examples
