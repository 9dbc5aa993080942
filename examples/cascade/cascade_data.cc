#include "examples/cascade/cascade_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "examples/cascade/cascade_config.h"
#include "examples/cascade/drr.h"
#include "examples/frame/image_io.h"
#include "examples/frame/nifti_io.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

namespace {

// File stems of each view, in the order they are looked for.
std::vector<std::string> ViewStems(const std::string& id, int64_t view) {
  if (view == 0) return {id + "_pa_drr", id + "_pa", id + "_frontal"};
  return {id + "_lat_drr", id + "_lat", id + "_lateral"};
}

std::string FirstExisting(const std::string& dir,
                          const std::vector<std::string>& names) {
  std::error_code ec;
  for (const std::string& n : names) {
    if (fs::is_regular_file(fs::path(dir) / n, ec)) return dir + "/" + n;
  }
  return "";
}

StatusOr<Patient> FindFiles(const std::string& dir, const std::string& id,
                            int64_t num_views) {
  Patient p;
  p.id = id;
  p.dir = dir;
  for (int64_t v = 0; v < num_views; ++v) {
    std::vector<std::string> names;
    for (const std::string& stem : ViewStems(id, v)) {
      for (const char* ext : {".png", ".jpg", ".jpeg"})
        names.push_back(stem + ext);
    }
    std::string found = FirstExisting(dir, names);
    if (found.empty()) {
      return NotFoundError(dir + ": missing the " + ViewName(v) + " view (" +
                           names[0] + ", " + names[3] + " or " + names[6] +
                           ", PNG or JPEG; xray_config.num_views is " +
                           std::to_string(num_views) + ")");
    }
    p.views.push_back(found);
  }
  p.ct = FirstExisting(dir, {id + ".nii.gz", id + ".nii"});
  if (p.ct.empty()) {
    if (!FirstExisting(dir, {id + ".npy"}).empty()) {
      return InvalidArgumentError(dir + ": " + id +
                                  ".npy: NumPy volumes are not read; write "
                                  "the CT volume as NIfTI (" +
                                  id + ".nii.gz)");
    }
    return NotFoundError(dir + ": missing the CT volume (" + id +
                         ".nii.gz or " + id + ".nii)");
  }
  return p;
}

double Uniform(std::mt19937_64& rng, double a, double b) {
  return std::uniform_real_distribution<double>(a, b)(rng);
}

// 1 inside, 0 outside, a soft edge about a twentieth of the radius wide.
torch::Tensor Inside(const torch::Tensor& radius) {
  return torch::sigmoid((1.0 - radius) / 0.05);
}

// A chest-like phantom in HU on a [D, H, W] grid (coordinates in [-1, 1];
// z = D superior-inferior, y = H anterior-posterior, x = W left-right).
torch::Tensor Phantom(const std::vector<int64_t>& size, std::mt19937_64& rng) {
  const auto axis = [&](int64_t i) {
    std::vector<int64_t> shape{1, 1, 1};
    shape[i] = size[i];
    return torch::linspace(-1, 1, size[i])
        .view(shape)
        .expand({size[0], size[1], size[2]});
  };
  const torch::Tensor z = axis(0), y = axis(1), x = axis(2);
  const auto ellipsoid = [&](double cz, double cy, double cx, double rz,
                             double ry, double rx) {
    return Inside(torch::sqrt(((z - cz) / rz).pow(2) + ((y - cy) / ry).pow(2) +
                              ((x - cx) / rx).pow(2)));
  };
  // Paints `value` HU where `mask` is, over what is there.
  torch::Tensor hu = torch::full({size[0], size[1], size[2]}, -1000.0);
  const auto paint = [&](const torch::Tensor& mask, double value) {
    hu = hu + mask * (value - hu);
  };
  const double cx = Uniform(rng, -0.15, 0.15), cy = Uniform(rng, -0.12, 0.12);
  const double rx = Uniform(rng, 0.55, 0.85), ry = Uniform(rng, 0.4, 0.65);
  // The body: an elliptic cylinder, a little narrower towards the top.
  const torch::Tensor body = Inside(torch::sqrt(
      ((x - cx) / (rx * (1.0 - 0.2 * z))).pow(2) + ((y - cy) / ry).pow(2)));
  paint(body, Uniform(rng, 0.0, 60.0));
  for (double side : {-1.0, 1.0}) {
    paint(
        body * ellipsoid(Uniform(rng, -0.3, 0.2), cy - 0.1 * ry,
                         cx + side * Uniform(rng, 0.35, 0.5) * rx,
                         Uniform(rng, 0.4, 0.75), Uniform(rng, 0.45, 0.7) * ry,
                         Uniform(rng, 0.22, 0.35) * rx),
        Uniform(rng, -900.0, -700.0));
  }
  const double spine_r = Uniform(rng, 0.1, 0.16);
  paint(body * Inside(torch::sqrt(((x - cx) / spine_r).pow(2) +
                                  ((y - cy - 0.7 * ry) / spine_r).pow(2))),
        Uniform(rng, 500.0, 900.0));
  const int nodules = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int k = 0; k < nodules; ++k) {
    const double r = Uniform(rng, 0.15, 0.28);
    paint(body * ellipsoid(Uniform(rng, -0.6, 0.6),
                           cy + Uniform(rng, -0.5, 0.3) * ry,
                           cx + Uniform(rng, -0.6, 0.6) * rx, r, r, r),
          Uniform(rng, 150.0, 700.0));
  }
  return hu;
}

torch::Tensor Normalize(const torch::Tensor& hu, const HuWindow& w) {
  return ((hu - w.low) / (w.high - w.low) * 2.0 - 1.0).clamp(-1.0, 1.0);
}

}  // namespace

StatusOr<std::vector<Patient>> ScanPatients(const std::string& dataset_path,
                                            int64_t num_views) {
  std::error_code ec;
  if (!fs::is_directory(dataset_path, ec)) {
    return NotFoundError("dataset_path " + dataset_path +
                         ": no such directory");
  }
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(dataset_path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_directory(ec)) continue;
    ids.push_back(name);
  }
  std::sort(ids.begin(), ids.end());
  if (ids.empty()) {
    return InvalidArgumentError(
        "dataset_path " + dataset_path +
        ": no patient folders (<id>/ with <id>_pa_drr.png, "
        "<id>_lat_drr.png and <id>.nii.gz)");
  }
  std::vector<Patient> patients;
  for (const std::string& id : ids) {
    DDP_ASSIGN_OR_RETURN(Patient p,
                         FindFiles(dataset_path + "/" + id, id, num_views));
    patients.push_back(std::move(p));
  }
  return patients;
}

StatusOr<PatientSample> LoadPatient(const Patient& patient,
                                    const LoadOptions& options) {
  PatientSample s;
  std::vector<torch::Tensor> views;
  for (const std::string& path : patient.views) {
    DDP_ASSIGN_OR_RETURN(
        torch::Tensor v,
        AtRow(patient.dir + ": ", ReadGrayImage(path, options.img_size)));
    views.push_back(options.flip_views_vertical ? v.flip({1}) : v);
  }
  s.views = torch::cat(views, 0);
  StatusOr<torch::Tensor> ct =
      ReadNiftiChecked(patient.ct, 1, options.volume_size);
  if (!ct.ok()) {
    std::string message = patient.dir + ": " + ct.status().message();
    if (message.find("wrong shape") != std::string::npos) {
      message += "; CT volumes must have the last stage's volume_size " +
                 SizeText(options.volume_size);
    }
    return Status(ct.status().code(), message);
  }
  s.volume = Normalize(*ct, options.window);
  return s;
}

torch::Tensor ResizeVolume(const torch::Tensor& volume,
                           const std::vector<int64_t>& size) {
  const bool batched = volume.dim() == 5;
  torch::Tensor v = batched ? volume : volume.unsqueeze(0);
  const auto from = v.sizes().slice(2);
  if (std::equal(from.begin(), from.end(), size.begin())) return volume;
  bool shrink = true;
  for (size_t a = 0; a < 3; ++a) shrink = shrink && size[a] <= from[a];
  v = shrink ? F::adaptive_avg_pool3d(v, F::AdaptiveAvgPool3dFuncOptions(size))
             : F::interpolate(v, F::InterpolateFuncOptions()
                                     .size(size)
                                     .mode(torch::kTrilinear)
                                     .align_corners(false));
  return batched ? v : v.squeeze(0);
}

Status WriteSyntheticPatients(const std::string& dir, int64_t n,
                              const std::vector<int64_t>& volume_size,
                              int64_t img_size, int64_t num_views,
                              uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 17);
  for (int64_t i = 0; i < n; ++i) {
    char id[32];
    std::snprintf(id, sizeof(id), "patient_%04lld", static_cast<long long>(i));
    const std::string folder = dir + "/" + id;
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec)
      return InternalError("cannot create " + folder + ": " + ec.message());
    const torch::Tensor hu = Phantom(volume_size, rng);
    DDP_RETURN_IF_ERROR(
        WriteNifti(folder + "/" + std::string(id) + ".nii.gz", hu));
    const torch::Tensor volume = Normalize(hu, HuWindow());
    for (int64_t v = 0; v < num_views; ++v) {
      const torch::Tensor image =
          F::interpolate(Drr(volume, v).unsqueeze(0).unsqueeze(0),
                         F::InterpolateFuncOptions()
                             .size(std::vector<int64_t>{img_size, img_size})
                             .mode(torch::kBilinear)
                             .align_corners(false))
              .squeeze();
      DDP_RETURN_IF_ERROR(
          WriteGrayPng(folder + "/" + ViewStems(id, v)[0] + ".png", image));
    }
  }
  return Status::Ok();
}

}  // namespace ddprun::examples
