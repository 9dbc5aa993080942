#include "examples/survival/survival_data.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "examples/common/csv_table.h"
#include "examples/common/nifti_io.h"

namespace ddprun::examples {

StatusOr<std::vector<SurvivalRecord>> ReadSurvivalCsv(
    const std::string& csv_path) {
  DDP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(csv_path));
  DDP_ASSIGN_OR_RETURN(int image_col, table.ColumnIndex("image"));
  DDP_ASSIGN_OR_RETURN(int time_col, table.ColumnIndex("time"));
  DDP_ASSIGN_OR_RETURN(int event_col, table.ColumnIndex("event"));
  const std::filesystem::path base =
      std::filesystem::path(csv_path).parent_path();
  std::vector<SurvivalRecord> records;
  for (const CsvRow& row : table.rows()) {
    SurvivalRecord r;
    r.where = table.Where(row);
    r.image = row.fields[image_col];
    if (r.image.empty())
      return InvalidArgumentError(table.Where(row) + "empty image path");
    if (std::filesystem::path(r.image).is_relative())
      r.image = (base / r.image).string();
    DDP_ASSIGN_OR_RETURN(r.time, table.GetDouble(row, time_col));
    DDP_ASSIGN_OR_RETURN(r.event, table.GetDouble(row, event_col));
    if (!(r.time > 0) || !std::isfinite(r.time)) {
      return InvalidArgumentError(table.Where(row) +
                                  "time must be a positive number, got " +
                                  row.fields[time_col]);
    }
    if (r.event != 0 && r.event != 1) {
      return InvalidArgumentError(table.Where(row) +
                                  "event must be 0 or 1, got " +
                                  row.fields[event_col]);
    }
    records.push_back(std::move(r));
  }
  if (records.empty()) return InvalidArgumentError(csv_path + ": no data rows");
  return records;
}

StatusOr<torch::Tensor> LoadSurvivalVolume(const std::string& path,
                                           const std::vector<int64_t>& size) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor v,
                       ReadNiftiChecked(path, /*channels=*/1, {}));
  if (v.size(1) != size[0] || v.size(2) != size[1] || v.size(3) != size[2]) {
    namespace F = torch::nn::functional;
    v = F::interpolate(v.unsqueeze(0), F::InterpolateFuncOptions()
                                           .size(size)
                                           .mode(torch::kTrilinear)
                                           .align_corners(false))
            .squeeze(0);
  }
  v = (v - v.mean()) / (v.std() + 1e-6);
  return v.contiguous();
}

Status WriteSyntheticSurvival(const std::string& dir, int64_t n, int64_t size,
                              uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/images", ec);
  if (ec)
    return InternalError("cannot create " + dir + "/images: " + ec.message());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  torch::manual_seed(seed);
  std::ofstream csv(dir + "/survival.csv.tmp");
  csv << "image,time,event\n";
  const double r_min = size * 0.08, r_max = size * 0.28;
  torch::Tensor grid = torch::arange(size, torch::kFloat32);
  torch::Tensor zz = grid.view({-1, 1, 1}), yy = grid.view({1, -1, 1}),
                xx = grid.view({1, 1, -1});
  for (int64_t i = 0; i < n; ++i) {
    const double radius = r_min + (r_max - r_min) * unit(rng);
    const double margin = radius + 1;
    auto center = [&] { return margin + (size - 2 * margin) * unit(rng); };
    const double cz = center(), cy = center(), cx = center();
    torch::Tensor dist2 =
        (zz - cz).pow(2) + (yy - cy).pow(2) + (xx - cx).pow(2);
    torch::Tensor volume = dist2.le(radius * radius).to(torch::kFloat32) +
                           0.3 * torch::randn({size, size, size});
    // Hazard grows with the radius: standardized radius times 1.5.
    const double z =
        ((radius - r_min) / (r_max - r_min) - 0.5) * std::sqrt(12.0);
    const double hazard = 0.1 * std::exp(1.5 * z);
    const double event_time = -std::log(1.0 - unit(rng)) / hazard;
    const double censor_time = -std::log(1.0 - unit(rng)) / 0.04;
    const bool event = event_time <= censor_time;
    const double time = std::max(0.01, std::min(event_time, censor_time));
    char name[32];
    std::snprintf(name, sizeof(name), "images/subject_%04lld.nii",
                  static_cast<long long>(i));
    DDP_RETURN_IF_ERROR(WriteNifti(dir + "/" + name, volume));
    csv << name << "," << time << "," << (event ? 1 : 0) << "\n";
  }
  csv.close();
  if (!csv) return InternalError("cannot write " + dir + "/survival.csv");
  std::filesystem::rename(dir + "/survival.csv.tmp", dir + "/survival.csv", ec);
  if (ec)
    return InternalError("cannot write " + dir +
                         "/survival.csv: " + ec.message());
  return Status::Ok();
}

}  // namespace ddprun::examples
