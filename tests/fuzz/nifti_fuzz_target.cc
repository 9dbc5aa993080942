// libFuzzer target over the trainers' NIfTI reader without Torch
// (examples/formats/nifti_volume.h, through nifti2_io: survival's and
// ddpm's volumes).
//
// Input: a .nii file's bytes; input starting with gzip's magic (1f 8b) is
// written as .nii.gz, as the data sets ship most volumes. The volume limit
// is set to 2^22 voxels (16 MiB of float32) so that what the header check
// lets through stays well inside the fuzzer's memory limit.
//
// Invariants (abort() on violation): an error names the file; a volume
// read has four extents >= 1 whose product is at most the limit, and its
// buffer (every float of it read, so that ASan sees a short one) holds
// that many voxels.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/formats/media_limits.h"
#include "examples/formats/nifti_volume.h"
#include "fuzz_check.h"
#include "fuzz_temp_dir.h"

namespace ddprun::examples {
namespace {

using fuzz::Check;

constexpr int64_t kLimit = int64_t{1} << 22;

}  // namespace
}  // namespace ddprun::examples

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::examples;
  static const ddprun::fuzz::FuzzTempDir dir;
  static const bool limited = [] {
    MediaLimits limits = GetMediaLimits();
    limits.max_volume_voxels = kLimit;
    SetMediaLimits(limits);
    return true;
  }();
  (void)limited;
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string path =
      dir.Write(gz ? "volume.nii.gz" : "volume.nii", data, size);
  ddprun::StatusOr<NiftiVolume> volume = ReadNiftiVolume(path);
  if (!volume.ok()) {
    Check(volume.status().message().find(path) != std::string::npos,
          "an error that does not name the file");
    return 0;
  }
  for (int64_t extent : volume->shape) Check(extent >= 1, "an extent < 1");
  Check(volume->numel() <= kLimit, "a volume above the limit");
  Check(volume->data != nullptr, "a volume without data");
  double sum = 0;
  for (int64_t i = 0; i < volume->numel(); ++i) sum += volume->data.get()[i];
  volatile double sink = sum;  // the reads stay
  (void)sink;
  return 0;
}
