// The Torch-free NIfTI reader (examples/formats/nifti_volume.h) on volumes
// nifti2_io wrote (tests/fuzz/corpus/nifti/, made by nifti_make_new_nim and
// nifti_image_write): shape, datatype conversion, scaling, and refusals.
#include <string>

#include "ddprun_catch.h"

#include "examples/formats/media_limits.h"
#include "examples/formats/nifti_volume.h"

namespace ddprun::examples {
namespace {

std::string Volume(const std::string& name) {
  return std::string(DDPRUN_SOURCE_DIR) + "/tests/fuzz/corpus/nifti/" + name;
}

TEST_CASE(
    "ReadNiftiVolume: float32 is taken over, ints are converted and "
    "scaled, channels come first",
    "[nifti]") {
  StatusOr<NiftiVolume> t1 = ReadNiftiVolume(Volume("t1_8cube.nii"));
  REQUIRE(t1.ok());
  CHECK(t1->shape == std::array<int64_t, 4>{1, 8, 8, 8});
  for (int64_t i : {0, 1, 16, 17, 511}) {
    CHECK(t1->data.get()[i] == static_cast<float>(i % 17) * 0.25f - 1.0f);
  }
  // int16 voxels i*7-40 with scl_slope 2, scl_inter -1024.
  StatusOr<NiftiVolume> ct = ReadNiftiVolume(Volume("ct_int16_scaled.nii"));
  REQUIRE(ct.ok());
  CHECK(ct->shape == std::array<int64_t, 4>{1, 4, 5, 6});
  for (int64_t i : {0, 5, 119}) {
    CHECK(ct->data.get()[i] == static_cast<float>((i * 7 - 40) * 2 - 1024));
  }
  // 4D, gzip: C is the 4th dimension.
  StatusOr<NiftiVolume> brats = ReadNiftiVolume(Volume("brats_4ch.nii.gz"));
  REQUIRE(brats.ok());
  CHECK(brats->shape == std::array<int64_t, 4>{4, 3, 4, 4});
  StatusOr<NiftiVolume> dose = ReadNiftiVolume(Volume("dose_float64.nii"));
  REQUIRE(dose.ok());
  CHECK(dose->data.get()[26] == static_cast<float>(26 * 0.5 * 0.5));
}

TEST_CASE(
    "ReadNiftiVolume: truncated, absent and over-limit volumes name "
    "the file",
    "[nifti]") {
  const std::string truncated = Volume("truncated.nii");
  StatusOr<NiftiVolume> t = ReadNiftiVolume(truncated);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.status().message(),
             Catch::Matchers::StartsWith(truncated + ": "));
  CHECK(ReadNiftiVolume(Volume("absent.nii")).status().code() ==
        StatusCode::kNotFound);
  const MediaLimits saved = GetMediaLimits();
  MediaLimits small = saved;
  small.max_volume_voxels = 100;
  SetMediaLimits(small);
  StatusOr<NiftiVolume> big = ReadNiftiVolume(Volume("t1_8cube.nii"));
  SetMediaLimits(saved);
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.status().message(), Catch::Contains("--max_volume_voxels"));
}

}  // namespace
}  // namespace ddprun::examples
