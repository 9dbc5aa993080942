#include "ddprun/worker/cpu_convolution_check.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "torch_compat.h"

namespace ddprun::worker {
namespace {

// The layers oneDNN 3.7.2 got wrong (see the header): 24 input channels for
// the forward pass, 8 output channels for the input gradient; one layer of
// each rank covers both.
struct ProbeLayer {
  int dims;
  int64_t in_channels;
  int64_t out_channels;
  int64_t size;
};
constexpr ProbeLayer kProbes[] = {{2, 24, 8, 16}, {3, 24, 8, 8}};

// A smooth deterministic tensor: the check must not draw from the global
// generator, or a run's random stream would depend on whether it ran.
at::Tensor Wave(at::IntArrayRef shape, double step) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return at::sin(at::arange(n, at::TensorOptions().dtype(at::kFloat)) * step)
      .reshape(shape);
}

struct Outputs {
  at::Tensor out, input_grad, weight_grad;
};

Outputs RunLayer(const ProbeLayer& p, bool onednn) {
  at::globalContext().setUserEnabledMkldnn(onednn);
  std::vector<int64_t> input_shape{2, p.in_channels};
  std::vector<int64_t> weight_shape{p.out_channels, p.in_channels};
  for (int d = 0; d < p.dims; ++d) {
    input_shape.push_back(p.size);
    weight_shape.push_back(3);
  }
  at::Tensor x = Wave(input_shape, 0.37).requires_grad_();
  at::Tensor w = Wave(weight_shape, 0.11).requires_grad_();
  const std::vector<int64_t> ones(p.dims, 1);
  at::Tensor y = p.dims == 2 ? at::conv2d(x, w, at::Tensor(), ones, ones)
                             : at::conv3d(x, w, at::Tensor(), ones, ones);
  at::Tensor g = Wave(y.sizes(), 0.05);
  std::vector<at::Tensor> grads = torch::autograd::grad({y}, {x, w}, {g});
  return {y.detach(), grads[0], grads[1]};
}

double RelativeDifference(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

std::string Describe(const ProbeLayer& p, const char* part) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "conv%dd 2x%lldx%lld^%d -> %lld, %s", p.dims,
                static_cast<long long>(p.in_channels),
                static_cast<long long>(p.size), p.dims,
                static_cast<long long>(p.out_channels), part);
  return buf;
}

// Restores the caller's modes whatever the check did.
class CheckModes {
 public:
  CheckModes()
      : onednn_(at::globalContext().userEnabledMkldnn()),
        autocast_(torch_compat::AutocastEnabled(c10::kCPU)),
        inference_off_(false),
        grad_on_(true) {
    torch_compat::SetAutocastEnabled(c10::kCPU, false);
  }
  ~CheckModes() {
    at::globalContext().setUserEnabledMkldnn(onednn_);
    torch_compat::SetAutocastEnabled(c10::kCPU, autocast_);
  }
  CheckModes(const CheckModes&) = delete;
  CheckModes& operator=(const CheckModes&) = delete;

 private:
  const bool onednn_;
  const bool autocast_;
  c10::InferenceMode inference_off_;
  at::AutoGradMode grad_on_;
};

bool IsLocalRankZero() {
  const char* local = std::getenv("LOCAL_RANK");
  return local == nullptr || *local == '\0' || std::strcmp(local, "0") == 0;
}

}  // namespace

bool CpuConvolutionCheck::agrees() const {
  return !onednn_available || max_relative_difference <= 1e-3;
}

CpuConvolutionCheck CompareCpuConvolutions() {
  CpuConvolutionCheck check;
  if (!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) {
    return check;
  }
  check.onednn_available = true;
  try {
    CheckModes modes;
    for (const ProbeLayer& p : kProbes) {
      const Outputs onednn = RunLayer(p, true);
      const Outputs native = RunLayer(p, false);
      const std::pair<const char*, double> parts[] = {
          {"forward", RelativeDifference(onednn.out, native.out)},
          {"input gradient",
           RelativeDifference(onednn.input_grad, native.input_grad)},
          {"weight gradient",
           RelativeDifference(onednn.weight_grad, native.weight_grad)}};
      for (const auto& [part, difference] : parts) {
        if (difference > check.max_relative_difference ||
            check.worst_case.empty()) {
          check.max_relative_difference = difference;
          check.worst_case = Describe(p, part);
        }
      }
    }
  } catch (const std::exception& e) {
    // A LibTorch that cannot run the probe cannot be judged by it: leave
    // oneDNN as it is and say why.
    check.onednn_available = false;
    check.worst_case = std::string("the check could not run: ") + e.what();
  }
  return check;
}

std::string CpuConvolutionWarning(const CpuConvolutionCheck& check) {
  char difference[32];
  std::snprintf(difference, sizeof(difference), "%.3g",
                check.max_relative_difference);
  return "[ddprun worker] warning: LibTorch's oneDNN computes float32 "
         "convolutions wrongly on this CPU (" +
         check.worst_case + ": " + difference +
         " relative difference from ATen's native kernel); oneDNN is off "
         "for this process, convolutions run on ATen's native kernels "
         "(correct, slower). Seen with Debian trixie's LibTorch 2.6 "
         "(oneDNN 3.7.2) on AVX-512 CPUs.\n";
}

const CpuConvolutionCheck& EnsureCpuConvolutionsAgree() {
  static std::once_flag once;
  static CpuConvolutionCheck result;
  std::call_once(once, [] {
    result = CompareCpuConvolutions();
    if (result.agrees()) return;
    at::globalContext().setUserEnabledMkldnn(false);
    if (IsLocalRankZero()) {
      const std::string line = CpuConvolutionWarning(result);
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
  });
  return result;
}

}  // namespace ddprun::worker
