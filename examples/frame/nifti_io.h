#pragma once

#include <string>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// Reads a NIfTI-1 or NIfTI-2 volume (.nii or .nii.gz, through nifti2_io) as a
// float32 tensor of shape [C, D, H, W]: C is the 4th NIfTI dimension (1 for a
// 3D volume), D/H/W are nz/ny/nx. scl_slope/scl_inter are applied.
// Errors: NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file for a
// bad header, truncated data, an unsupported datatype, more than 4 dims, or
// (checked from the header, before the data is read) a volume above
// GetMediaLimits().max_volume_voxels.
StatusOr<torch::Tensor> ReadNifti(const std::string& path);

// Like ReadNifti, then checks the shape: `channels` (0 = any) and, when
// `spatial` is non-empty, D/H/W. INVALID_ARGUMENT "<path>: expected ..."
// otherwise.
StatusOr<torch::Tensor> ReadNiftiChecked(const std::string& path,
                                         int64_t channels,
                                         const std::vector<int64_t>& spatial);

// Writes `volume` ([D, H, W] or [C, D, H, W], any float dtype) as float32 NIfTI
// with 1 mm voxels. The file appears atomically (written under a temporary
// name, checked, renamed). INTERNAL naming the file on I/O failure.
Status WriteNifti(const std::string& path, const torch::Tensor& volume);

}  // namespace ddprun::examples
