#include "ddprun/worker/conv3d.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/enum.h>

#include "ddprun/worker/cpu_convolution_check.h"
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

std::optional<at::Tensor> Conv3dImpl::DepthSlicedForward(
    const at::Tensor& input) {
  const auto& o = options;
  for (int d = 0; d < 3; ++d) {
    if ((*o.stride())[d] != 1 || (*o.dilation())[d] != 1) return std::nullopt;
  }
  if (torch::enumtype::get_enum_name(o.padding_mode()) != "kZeros") {
    return std::nullopt;
  }
  // The same zero padding on every side (how padding=1 and 'same' with a
  // cube kernel are stored), so its order in the vector does not matter.
  const std::vector<int64_t>& pads = _reversed_padding_repeated_twice;
  if (pads.size() != 6) return std::nullopt;
  for (int64_t v : pads) {
    if (v != pads[0]) return std::nullopt;
  }
  const int64_t pad = pads[0];
  const int64_t kd = (*o.kernel_size())[0];
  const int64_t out_depth = input.size(2) + 2 * pad - kd + 1;
  // A batch of one slice would be the same pitfall in 2D.
  if (out_depth < 2) return std::nullopt;
  // [1, C, D, H, W] -> the depth slices as a batch [D, C, H, W], zero
  // padded in depth; output slice z sees slices z..z+kd-1 of that, stacked
  // along channels to meet the kernel's depth taps in one conv2d.
  at::Tensor slices = input.select(0, 0).transpose(0, 1);
  if (pad > 0) {
    slices = at::constant_pad_nd(slices, {0, 0, 0, 0, 0, 0, pad, pad}, 0);
  }
  std::vector<at::Tensor> taps;
  for (int64_t i = 0; i < kd; ++i)
    taps.push_back(slices.narrow(0, i, out_depth));
  const at::Tensor stacked = at::cat(taps, 1);
  const at::Tensor w2 = weight.permute({0, 2, 1, 3, 4})
                            .reshape({weight.size(0), kd * weight.size(1),
                                      weight.size(3), weight.size(4)});
  const at::Tensor out =
      at::conv2d(stacked, w2, bias, /*stride=*/{1, 1}, /*padding=*/{pad, pad});
  return out.transpose(0, 1).unsqueeze(0).contiguous();
}

bool SmallerThanKernelUnderCpuAutocast(const torch::nn::Conv3dImpl& conv,
                                       const at::Tensor& input) {
  if (!input.defined() || input.dim() != 5 || !input.device().is_cpu() ||
      !torch_compat::AutocastEnabled(c10::kCPU)) {
    return false;
  }
  const auto& k = *conv.options.kernel_size();
  for (int d = 0; d < 3; ++d) {
    if (input.size(2 + d) >= k[d]) return false;
  }
  return true;
}

namespace {

// Turns CPU autocast off for its lifetime and back on after, also when the
// layer throws.
class CpuAutocastOff {
 public:
  CpuAutocastOff() { torch_compat::SetAutocastEnabled(c10::kCPU, false); }
  ~CpuAutocastOff() { torch_compat::SetAutocastEnabled(c10::kCPU, true); }
  CpuAutocastOff(const CpuAutocastOff&) = delete;
  CpuAutocastOff& operator=(const CpuAutocastOff&) = delete;
};

}  // namespace

at::Tensor Conv3dImpl::forward(const at::Tensor& input) {
  if (input.device().is_cpu()) EnsureCpuConvolutionsAgree();
  if (SmallerThanKernelUnderCpuAutocast(*this, input)) {
    CpuAutocastOff off;
    return torch::nn::Conv3dImpl::forward(input.to(weight.scalar_type()));
  }
  if (!TakesSingleSampleNativeKernel(*this, input)) {
    return torch::nn::Conv3dImpl::forward(input);
  }
  if (std::optional<at::Tensor> out = DepthSlicedForward(input)) return *out;
  return torch::nn::Conv3dImpl::forward(at::cat({input, at::zeros_like(input)}))
      .narrow(0, 0, 1);
}

}  // namespace ddprun::worker
