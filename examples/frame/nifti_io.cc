#include "examples/frame/nifti_io.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <nifti2_io.h>

#include "examples/formats/media_limits.h"

namespace ddprun::examples {
namespace {

struct NiftiFree {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiFree>;

StatusOr<torch::ScalarType> TorchType(int datatype) {
  switch (datatype) {
    case DT_UINT8:
      return torch::kUInt8;
    case DT_INT8:
      return torch::kInt8;
    case DT_INT16:
      return torch::kInt16;
    case DT_INT32:
      return torch::kInt32;
    case DT_INT64:
      return torch::kInt64;
    case DT_FLOAT32:
      return torch::kFloat32;
    case DT_FLOAT64:
      return torch::kFloat64;
    default:
      return InvalidArgumentError("unsupported NIfTI datatype " +
                                  std::to_string(datatype));
  }
}

std::string Shape(const torch::Tensor& t) {
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i)
    s += (i ? "x" : "") + std::to_string(t.size(i));
  return s;
}

}  // namespace

StatusOr<torch::Tensor> ReadNifti(const std::string& path) {
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
  StatusOr<torch::ScalarType> type = TorchType(header->datatype);
  if (!type.ok())
    return InvalidArgumentError(path + ": " + type.status().message());
  // Checked before nifti_image_load allocates: a small .nii.gz may declare
  // a huge volume.
  std::vector<int64_t> dims;
  for (int i = 1; i <= header->ndim; ++i) dims.push_back(header->dim[i]);
  DDP_RETURN_IF_ERROR(CheckVolumeVoxels(path, dims));
  if (nifti_image_load(header.get()) != 0 || header->data == nullptr) {
    return InvalidArgumentError(
        path + ": truncated or unreadable image data (" +
        std::to_string(header->nvox) + " voxels expected)");
  }
  const int64_t nx = header->nx, ny = std::max<int64_t>(header->ny, 1),
                nz = std::max<int64_t>(header->nz, 1),
                nt = header->ndim >= 4 ? std::max<int64_t>(header->nt, 1) : 1;
  torch::Tensor out;
  if (*type == torch::kFloat32) {
    // The common case: the tensor takes over the library's buffer (malloc'd
    // by nifti_image_load) instead of copying it, one pass less per volume
    // on the loading thread, which at 2 ranks on 2 cores is the training
    // thread.
    void* data = header->data;
    header->data = nullptr;
    out = torch::from_blob(data, {nt, nz, ny, nx}, [](void* p) { free(p); },
                           torch::TensorOptions().dtype(torch::kFloat32));
  } else {
    out = torch::from_blob(header->data, {nt, nz, ny, nx},
                           torch::TensorOptions().dtype(*type))
              .to(torch::kFloat32);
  }
  if (header->scl_slope != 0.0 &&
      (header->scl_slope != 1.0 || header->scl_inter != 0.0)) {
    out = out * header->scl_slope + header->scl_inter;
  }
  return out;
}

StatusOr<torch::Tensor> ReadNiftiChecked(const std::string& path,
                                         int64_t channels,
                                         const std::vector<int64_t>& spatial) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor v, ReadNifti(path));
  bool ok = channels <= 0 || v.size(0) == channels;
  for (size_t i = 0; ok && i < spatial.size(); ++i)
    ok = v.size(i + 1) == spatial[i];
  if (!ok) {
    std::string want = channels > 0 ? std::to_string(channels) : "C";
    for (int64_t s : spatial) want += "x" + std::to_string(s);
    return InvalidArgumentError(path + ": wrong shape " + Shape(v) +
                                " (expected " + want + ", as CxDxHxW)");
  }
  return v;
}

Status WriteNifti(const std::string& path, const torch::Tensor& volume) {
  torch::Tensor v =
      volume.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  if (v.dim() == 3) v = v.unsqueeze(0);
  if (v.dim() != 4) {
    return InvalidArgumentError("WriteNifti " + path +
                                ": expected [D,H,W] or [C,D,H,W], got " +
                                Shape(v));
  }
  const int64_t c = v.size(0);
  int64_t dims[8] = {
      c > 1 ? 4 : 3, v.size(3), v.size(2), v.size(1), c, 1, 1, 1};
  NiftiPtr nim(nifti_make_new_nim(dims, DT_FLOAT32, /*data_fill=*/1));
  if (!nim)
    return InternalError("WriteNifti " + path + ": cannot allocate header");
  std::memcpy(nim->data, v.data_ptr<float>(), v.numel() * sizeof(float));
  // nifti_set_filenames derives names from the extension: keep it on the
  // temporary name so .nii.gz stays compressed.
  std::filesystem::path final_path(path);
  std::string ext = path.size() > 7 && path.substr(path.size() - 7) == ".nii.gz"
                        ? ".nii.gz"
                        : ".nii";
  std::string stem = path.substr(
      0, path.size() - (path.size() >= ext.size() &&
                                path.substr(path.size() - ext.size()) == ext
                            ? ext.size()
                            : 0));
  std::string tmp = stem + ".tmp" + std::to_string(::getpid()) + ext;
  if (nifti_set_filenames(nim.get(), tmp.c_str(), /*check=*/0,
                          /*set_byte_order=*/1) != 0) {
    return InternalError("WriteNifti " + path + ": bad file name");
  }
  nifti_image_write(nim.get());  // Reports no status: verify by reading back.
  NiftiPtr check(nifti_image_read(tmp.c_str(), /*read_data=*/0));
  std::error_code ec;
  if (!check || check->nvox != nim->nvox) {
    std::filesystem::remove(tmp, ec);
    return InternalError("WriteNifti " + path + ": write failed");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return InternalError("WriteNifti " + path + ": rename: " + ec.message());
  return Status::Ok();
}

}  // namespace ddprun::examples
