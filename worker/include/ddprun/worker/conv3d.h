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
// oneDNN anyway), takes torch's path unchanged.
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

// Whether LibTorch sends `input` through `conv` on its native kernel only
// because the batch is one: what Conv3d pads. Exposed for tests.
bool TakesSingleSampleNativeKernel(const torch::nn::Conv3dImpl& conv,
                                   const at::Tensor& input);

}  // namespace ddprun::worker
