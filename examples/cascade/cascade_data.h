#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// One patient folder of the guide's dataset_path
// (./data/drr_patient_data/<id>/):
//   <id>_pa_drr.png    frontal view (also <id>_pa.* or <id>_frontal.*)
//   <id>_lat_drr.png   lateral view (also <id>_lat.* or <id>_lateral.*)
//   <id>.nii.gz        the CT volume in HU (or <id>.nii)
// Views are PNG or JPEG, any size (resized to xray_config.img_size).
struct Patient {
  std::string id;
  std::string dir;
  std::vector<std::string> views;  // num_views paths, frontal first
  std::string ct;
};

// The folders of `dataset_path` (sorted by name; names starting with '.'
// skipped), each with its files found. INVALID_ARGUMENT / NOT_FOUND, one
// line naming the folder, for: a missing dataset_path or one without
// patient folders, a folder without one of the first `num_views` views
// (listing the names looked for) or without its CT volume (a .npy volume
// is named as unsupported).
StatusOr<std::vector<Patient>> ScanPatients(const std::string& dataset_path,
                                            int64_t num_views);

// How HU map to the network's [-1, 1]: [low, high] linearly, clamped.
struct HuWindow {
  double low = -1000;
  double high = 1000;
};

// A patient as the network sees it.
struct PatientSample {
  torch::Tensor views;   // [V, S, S] in [0, 1]
  torch::Tensor volume;  // [1, D, H, W] in [-1, 1], the full volume_size
};

struct LoadOptions {
  int64_t img_size = 32;
  std::vector<int64_t> volume_size;  // the last stage's D, H, W
  HuWindow window;
  bool flip_views_vertical = false;  // data.flip_drrs_vertical
};

// Reads a patient's views and CT volume with examples/frame's readers
// (their size limits included). The volume must be exactly
// options.volume_size; the error (INVALID_ARGUMENT) then names the folder,
// the file, its shape and the size expected. Thread-safe.
StatusOr<PatientSample> LoadPatient(const Patient& patient,
                                    const LoadOptions& options);

// `volume` ([1, D, H, W] or [B, 1, D, H, W]) resampled to `size` by area
// averaging (or trilinear when growing).
torch::Tensor ResizeVolume(const torch::Tensor& volume,
                           const std::vector<int64_t>& size);

// Writes `n` synthetic patients (patient_0000 ...) to `dir`: a random
// chest-like phantom in HU of `volume_size` (body, lungs, spine, dense
// nodules; position, size and contrast vary per patient) and its views as
// real radiographs of that volume (Drr of the volume in the default HU
// window, resampled to img_size^2, 8-bit PNG). Deterministic for a seed.
Status WriteSyntheticPatients(const std::string& dir, int64_t n,
                              const std::vector<int64_t>& volume_size,
                              int64_t img_size, int64_t num_views,
                              uint64_t seed);

}  // namespace ddprun::examples
