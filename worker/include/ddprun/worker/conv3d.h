#pragma once

#include <optional>

#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace ddprun::worker {

// torch::nn::Conv3d without LibTorch's CPU batch-of-one pitfall, for models
// whose per-rank batch shrinks to one under data parallelism.
//
// LibTorch picks a convolution kernel at every call. On the CPU, a float
// input of batch 1 whose N*C*D*H is at most 20480 (32 channels at 16^3,
// for example) is sent to the native slow_conv3d instead of oneDNN, and
// backward follows the same choice: 267 ms for forward and backward of one
// 32->32 3x3x3 layer at 16^3 against 13 ms for a batch of TWO (LibTorch
// 1.13; 191 against 13 ms with 2.6). So a 2-rank run at the same total
// batch as a 1-rank run at batch 2 was slower than the 1-rank run.
//
// forward() therefore runs such an input another way, with results equal
// to the plain layer's up to float rounding (tested):
//  - stride 1, no dilation, the same zero padding on every side (the usual
//    3x3x3 layer): as ONE conv2d over its depth slices, a batch of D images
//    with the kernel's depth taps stacked along channels, which oneDNN takes
//    (10 ms for the layer above, against 17 ms at batch two);
//  - otherwise (strided, say): as a batch of two, the second sample all
//    zeros, returning the first; the zero sample adds nothing to any
//    gradient, at the cost of the fast kernel on two samples.
// Every other input, and CPU autocast (whose bfloat16 convolutions go to
// oneDNN anyway), takes torch's path unchanged, except an input smaller
// than the kernel under CPU autocast (SmallerThanKernelUnderCpuAutocast).
// The first forward of a CPU input runs EnsureCpuConvolutionsAgree()
// (cpu_convolution_check.h), which may turn oneDNN off for the process.
// Parameters and their names are torch::nn::Conv3d's, so checkpoints of
// either load into the other. clone() is torch::nn::Conv3d's (it returns
// the base module).
class Conv3dImpl : public torch::nn::Conv3dImpl {
 public:
  using torch::nn::Conv3dImpl::Conv3dImpl;
  at::Tensor forward(const at::Tensor& input);

 private:
  // The conv2d-over-depth-slices form, or nullopt where it does not apply.
  std::optional<at::Tensor> DepthSlicedForward(const at::Tensor& input);
};
TORCH_MODULE(Conv3d);

// Whether `input` is smaller than `conv`'s kernel in every spatial dimension
// while CPU autocast is on: Conv3d then runs the layer in its weights' dtype
// (float32) with autocast off. LibTorch 2.6's CPU bfloat16 convolution gave
// such layers (ResNet-50's last stages at 1^3 and 2^3 voxels under --amp)
// non-finite weight gradients that varied from run to run: NaN weights
// after one step. Such a layer costs next to nothing in float32. Exposed for
// tests.
bool SmallerThanKernelUnderCpuAutocast(const torch::nn::Conv3dImpl& conv,
                                       const at::Tensor& input);

// Whether LibTorch sends `input` through `conv` on its native kernel only
// because the batch is one: what Conv3d pads. Exposed for tests.
bool TakesSingleSampleNativeKernel(const torch::nn::Conv3dImpl& conv,
                                   const at::Tensor& input);

}  // namespace ddprun::worker
