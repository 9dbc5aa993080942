#include "examples/ddpm/brats_data.h"

#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "examples/common/csv_table.h"
#include "examples/common/nifti_io.h"

namespace ddprun::examples {

StatusOr<std::vector<BratsCase>> ReadBratsCsv(const std::string& csv_path) {
  DDP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(csv_path));
  DDP_ASSIGN_OR_RETURN(int column, table.ColumnIndex("image"));
  const std::filesystem::path base =
      std::filesystem::path(csv_path).parent_path();
  std::vector<BratsCase> paths;
  for (const CsvRow& row : table.rows()) {
    const std::string& p = row.fields[column];
    if (p.empty())
      return InvalidArgumentError(table.Where(row) + "empty image path");
    paths.push_back(
        {std::filesystem::path(p).is_relative() ? (base / p).string() : p,
         table.Where(row)});
  }
  if (paths.empty()) return InvalidArgumentError(csv_path + ": no data rows");
  return paths;
}

StatusOr<torch::Tensor> LoadBratsCase(const std::string& path, int64_t size) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor v,
                       ReadNiftiChecked(path, kBratsModalities, {}));
  if (v.size(1) != size || v.size(2) != size || v.size(3) != size) {
    namespace F = torch::nn::functional;
    v = F::interpolate(v.unsqueeze(0),
                       F::InterpolateFuncOptions()
                           .size(std::vector<int64_t>{size, size, size})
                           .mode(torch::kTrilinear)
                           .align_corners(false))
            .squeeze(0);
  }
  torch::Tensor flat = v.flatten(1);
  torch::Tensor lo = std::get<0>(flat.min(1)).view({-1, 1, 1, 1});
  torch::Tensor hi = std::get<0>(flat.max(1)).view({-1, 1, 1, 1});
  return ((v - lo) / (hi - lo).clamp_min(1e-6) * 2 - 1).contiguous();
}

Status WriteSyntheticBrats(const std::string& dir, int64_t n, int64_t size,
                           uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/volumes", ec);
  if (ec)
    return InternalError("cannot create " + dir + "/volumes: " + ec.message());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  torch::manual_seed(seed);
  torch::Tensor grid = torch::arange(size, torch::kFloat32);
  torch::Tensor zz = grid.view({-1, 1, 1}), yy = grid.view({1, -1, 1}),
                xx = grid.view({1, 1, -1});
  auto balls = [&](int count) {
    torch::Tensor m = torch::zeros({size, size, size});
    for (int b = 0; b < count; ++b) {
      const double r = size * (0.12 + 0.12 * unit(rng));
      const double cz = size * unit(rng), cy = size * unit(rng),
                   cx = size * unit(rng);
      m = torch::max(m, ((zz - cz).pow(2) + (yy - cy).pow(2) + (xx - cx).pow(2))
                            .le(r * r)
                            .to(torch::kFloat32));
    }
    return m;
  };
  std::ofstream csv(dir + "/cases.csv.tmp");
  csv << "image\n";
  for (int64_t i = 0; i < n; ++i) {
    torch::Tensor a = balls(3), b = balls(3);
    torch::Tensor volume = torch::stack({a, b, a + b, a - b}) +
                           0.05 * torch::randn({4, size, size, size});
    char name[40];
    std::snprintf(name, sizeof(name), "volumes/case_%04lld.nii",
                  static_cast<long long>(i));
    DDP_RETURN_IF_ERROR(WriteNifti(dir + "/" + name, volume));
    csv << name << "\n";
  }
  csv.close();
  if (!csv) return InternalError("cannot write " + dir + "/cases.csv");
  std::filesystem::rename(dir + "/cases.csv.tmp", dir + "/cases.csv", ec);
  if (ec)
    return InternalError("cannot write " + dir + "/cases.csv: " + ec.message());
  return Status::Ok();
}

}  // namespace ddprun::examples
