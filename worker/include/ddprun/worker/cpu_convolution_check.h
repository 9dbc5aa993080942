#pragma once

#include <string>

namespace ddprun::worker {

// Whether LibTorch's oneDNN convolutions compute what ATen's own kernels
// compute on this CPU, checked once per process; where they do not, oneDNN
// is turned off for the process.
//
// Why: Debian trixie's LibTorch 2.6 (oneDNN 3.7.2) on an AVX-512 CPU with
// bfloat16 (an AMD EPYC here) returns wrong float32 convolutions through
// its jit:avx512_core kernels: the forward pass of a 3x3 layer with 24 input
// channels, and the input gradient of a 3x3 layer with 8 output channels
// (2-D and 3-D alike, batch 2 and up; 0.3 to 1.4 relative error, the same
// on every run). Training reads NaN within two steps. ATen's native kernels
// are right there. oneDNN cannot be told to use another kernel once it has
// run, so the fallback is ATen's native convolutions for the whole process:
// correct and slower.
//
// The check runs a float32 2-D and 3-D convolution of those shapes
// (deterministic inputs; the global random generator is not touched) with
// oneDNN and without, forward and both gradients, under grad mode and with
// autocast off whatever the caller's modes. It costs a few milliseconds.

// The result of one comparison.
struct CpuConvolutionCheck {
  bool onednn_available = false;  // LibTorch built with oneDNN, and enabled
  // The largest relative difference (max |a-b| / max |b|) between oneDNN's
  // and ATen's native outputs and gradients over the probe layers.
  double max_relative_difference = 0.0;
  std::string worst_case;  // e.g. "conv3d 2x24x8^3 -> 8, forward"
  bool agrees() const;     // difference within float32 rounding (1e-3)
};

// Runs the comparison; changes nothing. Thread-safe with respect to itself
// only (it toggles LibTorch's global oneDNN switch while it runs: call it
// before the process's own convolutions start, or from a test).
CpuConvolutionCheck CompareCpuConvolutions();

// The process-wide check: the first call runs CompareCpuConvolutions() and,
// when oneDNN disagrees, turns oneDNN off for the process and prints one
// warning to stderr (from LOCAL_RANK 0, or a process without it) naming the
// difference and the cost. Later calls return the first result. Called by
// RunMain before the trainer starts and by worker::Conv3d's first CPU
// forward (for code that does not go through RunMain, like tests).
// Thread-safe (std::call_once).
const CpuConvolutionCheck& EnsureCpuConvolutionsAgree();

// The warning EnsureCpuConvolutionsAgree prints for `check` (exposed for
// tests).
std::string CpuConvolutionWarning(const CpuConvolutionCheck& check);

}  // namespace ddprun::worker
