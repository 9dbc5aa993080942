#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// A NIfTI volume decoded to float32, without Torch: what
// examples/frame's ReadNifti wraps in a tensor (and what the NIfTI fuzz
// target reads).
struct NiftiVolume {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  // C, D, H, W: C the 4th NIfTI dimension (1 for a 3D volume), D/H/W
  // nz/ny/nx; every one >= 1.
  std::array<int64_t, 4> shape{};
  // shape's product floats, malloc'd (a tensor may take it over with free
  // as its deleter).
  std::unique_ptr<float, Free> data;

  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

// Reads a NIfTI-1 or NIfTI-2 volume (.nii or .nii.gz, through nifti2_io):
// voxels converted to float32, scl_slope/scl_inter applied. Errors:
// NOT_FOUND for a missing file (or one that is not a regular file);
// INVALID_ARGUMENT naming the file for a bad header, truncated data, an
// unsupported datatype, more than 4 dims, or (checked from the header,
// before the data is read) a volume above GetMediaLimits().max_volume_voxels.
StatusOr<NiftiVolume> ReadNiftiVolume(const std::string& path);

}  // namespace ddprun::examples
