#include "examples/frame/nifti_io.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <nifti2_io.h>

#include "examples/formats/nifti_volume.h"

namespace ddprun::examples {
namespace {

struct NiftiFree {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NiftiPtr = std::unique_ptr<nifti_image, NiftiFree>;

std::string Shape(const torch::Tensor& t) {
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i)
    s += (i ? "x" : "") + std::to_string(t.size(i));
  return s;
}

}  // namespace

StatusOr<torch::Tensor> ReadNifti(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(NiftiVolume volume, ReadNiftiVolume(path));
  // The tensor takes the buffer over (malloc'd: free is its deleter).
  const auto& s = volume.shape;
  return torch::from_blob(
      volume.data.release(), {s[0], s[1], s[2], s[3]},
      [](void* p) { std::free(p); },
      torch::TensorOptions().dtype(torch::kFloat32));
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
