#include "ddprun/worker/conv3d.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "torch_compat.h"

namespace ddprun::worker {

// Mirrors the CPU branch of ConvParams::use_mkldnn in ATen's
// Convolution.cpp (unchanged from 1.13 through 2.6 in what matters here):
// oneDNN is skipped for a single-sample float input unless the layer is
// grouped, its kernel exceeds 3 in both of the last two dimensions, or
// N*C*D*H exceeds 20480; a 1x1 unstrided, undilated kernel on one thread
// stays native at any batch, so padding would not help it.
bool TakesSingleSampleNativeKernel(const torch::nn::Conv3dImpl& conv,
                                   const at::Tensor& input) {
  if (!input.defined() || input.dim() != 5 || input.size(0) != 1 ||
      !input.device().is_cpu() || input.scalar_type() != at::kFloat ||
      input.is_mkldnn() || torch_compat::AutocastEnabled(c10::kCPU)) {
    return false;
  }
  const auto& o = conv.options;
  if (o.transposed() || o.groups() != 1) return false;
  const auto& k = *o.kernel_size();
  const auto& stride = *o.stride();
  const auto& dilation = *o.dilation();
  bool strided = false, dilated = false;
  for (int d = 0; d < 3; ++d) {
    strided = strided || stride[d] != 1;
    dilated = dilated || dilation[d] != 1;
  }
  const bool one_by_one = k[1] == 1 && k[2] == 1;
  if (!strided && !dilated && one_by_one && at::get_num_threads() <= 1) {
    return false;
  }
  if (k[1] > 3 && k[2] > 3) return false;
  return input.size(1) * input.size(2) * input.size(3) <= 20480;
}

at::Tensor Conv3dImpl::forward(const at::Tensor& input) {
  if (!TakesSingleSampleNativeKernel(*this, input)) {
    return torch::nn::Conv3dImpl::forward(input);
  }
  // Forward alone gains as much (slow_conv3d's forward is 74 ms there).
  return torch::nn::Conv3dImpl::forward(at::cat({input, at::zeros_like(input)}))
      .narrow(0, 0, 1);
}

}  // namespace ddprun::worker
