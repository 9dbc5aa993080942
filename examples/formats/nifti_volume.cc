#include "examples/formats/nifti_volume.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include <nifti2_io.h>

#include "examples/formats/media_limits.h"

namespace ddprun::examples {
namespace {

struct NiftiFree {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiFree>;

// The library's voxels of type T, as float.
template <typename T>
void ToFloat(const void* data, int64_t n, float* out) {
  const T* in = static_cast<const T*>(data);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

using ConvertFn = void (*)(const void* data, int64_t n, float* out);

// The conversion of a datatype the trainers read (nullptr for float32,
// which needs none); false for one they do not.
bool Converter(int datatype, ConvertFn* convert) {
  switch (datatype) {
    case DT_FLOAT32:
      *convert = nullptr;
      return true;
    case DT_UINT8:
      *convert = ToFloat<uint8_t>;
      return true;
    case DT_INT8:
      *convert = ToFloat<int8_t>;
      return true;
    case DT_INT16:
      *convert = ToFloat<int16_t>;
      return true;
    case DT_INT32:
      *convert = ToFloat<int32_t>;
      return true;
    case DT_INT64:
      *convert = ToFloat<int64_t>;
      return true;
    case DT_FLOAT64:
      *convert = ToFloat<double>;
      return true;
    default:
      return false;
  }
}

}  // namespace

StatusOr<NiftiVolume> ReadNiftiVolume(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("NIfTI file not found: " + path);
  }
  nifti_set_debug_level(0);  // Our message names the file; keep stderr clean.
  NiftiPtr header(nifti_image_read(path.c_str(), /*read_data=*/0));
  if (!header) {
    return InvalidArgumentError(path +
                                ": not a readable NIfTI file (bad header)");
  }
  if (header->ndim < 1 || header->ndim > 4) {
    return InvalidArgumentError(path + ": expected a 3D or 4D volume, got " +
                                std::to_string(header->ndim) + " dimensions");
  }
  ConvertFn convert = nullptr;
  if (!Converter(header->datatype, &convert)) {
    return InvalidArgumentError(path + ": unsupported NIfTI datatype " +
                                std::to_string(header->datatype));
  }
  // Checked before nifti_image_load allocates: a small .nii.gz may declare
  // a huge volume.
  std::vector<int64_t> dims;
  for (int i = 1; i <= header->ndim; ++i) dims.push_back(header->dim[i]);
  DDP_RETURN_IF_ERROR(CheckVolumeVoxels(path, dims));
  NiftiVolume volume;
  volume.shape = {1, 1, 1, 1};  // C, D, H, W = dim 4, 3, 2, 1
  for (int i = 1; i <= header->ndim; ++i) volume.shape[4 - i] = dims[i - 1];
  // The buffer's size is the library's nvox: refused unless it is the shape.
  if (header->nvox != volume.numel()) {
    return InvalidArgumentError(
        path + ": header declares " + std::to_string(header->nvox) +
        " voxels, its dimensions " + std::to_string(volume.numel()));
  }
  if (nifti_image_load(header.get()) != 0 || header->data == nullptr) {
    return InvalidArgumentError(
        path + ": truncated or unreadable image data (" +
        std::to_string(header->nvox) + " voxels expected)");
  }
  const int64_t n = volume.numel();
  if (convert == nullptr) {
    // The common case: the library's buffer (malloc'd by nifti_image_load)
    // is taken over, not copied: one pass less per volume on the loading
    // thread, which at 2 ranks on 2 cores is the training thread.
    volume.data.reset(static_cast<float*>(header->data));
    header->data = nullptr;
  } else {
    volume.data.reset(static_cast<float*>(
        std::malloc(static_cast<size_t>(n) * sizeof(float))));
    if (!volume.data) {
      return InvalidArgumentError(path + ": no memory for " +
                                  std::to_string(n) + " voxels");
    }
    convert(header->data, n, volume.data.get());
  }
  if (header->scl_slope != 0.0 &&
      (header->scl_slope != 1.0 || header->scl_inter != 0.0)) {
    // In float, as a float32 tensor times a scalar computes it.
    const float slope = static_cast<float>(header->scl_slope);
    const float inter = static_cast<float>(header->scl_inter);
    float* v = volume.data.get();
    for (int64_t i = 0; i < n; ++i) {
      const float scaled = v[i] * slope;
      v[i] = scaled + inter;
    }
  }
  return volume;
}

}  // namespace ddprun::examples
