#include "examples/ddpm/ddpm_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "examples/formats/csv_table.h"
#include "examples/frame/nifti_io.h"

namespace ddprun::examples {
namespace {

namespace fs = std::filesystem;

// BraTS 2023's names of the same modalities, in channel order.
const std::vector<std::string>& Brats2023Names() {
  static const std::vector<std::string> names{"t1n", "t1c", "t2w", "t2f"};
  return names;
}

std::string Resolve(const fs::path& base, const std::string& p) {
  return fs::path(p).is_relative() ? (base / p).string() : p;
}

// The file of `modality` in case folder `dir`, or an error naming the case,
// the modality and the names looked for.
StatusOr<std::string> FindModality(const fs::path& dir, size_t modality) {
  const std::string c = dir.filename().string();
  const std::string& name = BratsModalityNames()[modality];
  const std::vector<std::string> candidates{
      c + "_" + name + ".nii.gz", c + "_" + name + ".nii",
      c + "-" + Brats2023Names()[modality] + ".nii.gz",
      c + "-" + Brats2023Names()[modality] + ".nii"};
  std::error_code ec;
  for (const std::string& f : candidates) {
    if (fs::is_regular_file(dir / f, ec)) return (dir / f).string();
  }
  std::string looked;
  for (const std::string& f : candidates)
    looked += (looked.empty() ? "" : ", ") + f;
  return InvalidArgumentError(dir.string() + ": case '" + c + "' has no " +
                              name + " volume (looked for " + looked + ")");
}

}  // namespace

const std::vector<std::string>& BratsModalityNames() {
  static const std::vector<std::string> names{"t1", "t1ce", "t2", "flair"};
  return names;
}

StatusOr<std::vector<BratsCase>> ReadBratsCsv(const std::string& csv_path) {
  DDP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(csv_path));
  std::vector<int> columns;
  if (table.ColumnIndex("image").ok()) {
    columns.push_back(*table.ColumnIndex("image"));
  } else {
    for (const std::string& m : BratsModalityNames()) {
      StatusOr<int> column = table.ColumnIndex(m);
      if (!column.ok()) {
        return InvalidArgumentError(
            csv_path +
            ": needs an `image` column (4-channel NIfTI) or the columns "
            "t1,t1ce,t2,flair (one NIfTI per modality); " +
            column.status().message());
      }
      columns.push_back(*column);
    }
  }
  const fs::path base = fs::path(csv_path).parent_path();
  std::vector<BratsCase> cases;
  for (const CsvRow& row : table.rows()) {
    BratsCase c;
    c.where = table.Where(row);
    for (int column : columns) {
      const std::string& p = row.fields[column];
      if (p.empty()) {
        return InvalidArgumentError(c.where + "empty path in column '" +
                                    table.header()[column] + "'");
      }
      c.files.push_back(Resolve(base, p));
    }
    c.name = c.files[0];
    cases.push_back(std::move(c));
  }
  if (cases.empty()) return InvalidArgumentError(csv_path + ": no data rows");
  return cases;
}

StatusOr<std::vector<BratsCase>> ScanBratsRoot(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return InvalidArgumentError(
        root + ": " +
        (fs::exists(root, ec)
             ? "not a directory (--data_root takes a folder of BraTS case "
               "folders; a CSV list goes to --csv_path)"
             : "no such directory"));
  }
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_directory(ec))
      dirs.push_back(e.path());
  }
  if (ec) return InvalidArgumentError(root + ": " + ec.message());
  if (dirs.empty()) {
    return InvalidArgumentError(
        root +
        ": no BraTS case folders (expected <case>/<case>_t1.nii.gz, "
        "_t1ce, _t2 and _flair in " +
        root + ")");
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<BratsCase> cases;
  for (const fs::path& dir : dirs) {
    BratsCase c;
    c.name = dir.filename().string();
    for (size_t m = 0; m < BratsModalityNames().size(); ++m) {
      DDP_ASSIGN_OR_RETURN(std::string file, FindModality(dir, m));
      c.files.push_back(std::move(file));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

StatusOr<torch::Tensor> LoadBratsCase(const BratsCase& c, int64_t size) {
  torch::Tensor v;
  if (c.files.size() == 1) {
    DDP_ASSIGN_OR_RETURN(v, ReadNiftiChecked(c.files[0], kBratsModalities, {}));
  } else {
    std::vector<torch::Tensor> channels;
    for (const std::string& file : c.files) {
      DDP_ASSIGN_OR_RETURN(torch::Tensor m, ReadNiftiChecked(file, 1, {}));
      if (!channels.empty() && m.sizes() != channels[0].sizes()) {
        return InvalidArgumentError(
            file + ": shape " + std::to_string(m.size(1)) + "x" +
            std::to_string(m.size(2)) + "x" + std::to_string(m.size(3)) +
            " differs from " + c.files[0] + " (" +
            std::to_string(channels[0].size(1)) + "x" +
            std::to_string(channels[0].size(2)) + "x" +
            std::to_string(channels[0].size(3)) + ")");
      }
      channels.push_back(m);
    }
    v = torch::cat(channels);
  }
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
                           uint64_t seed, SyntheticLayout layout) {
  const bool brats = layout == SyntheticLayout::kBrats;
  std::error_code ec;
  fs::create_directories(brats ? dir : dir + "/volumes", ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
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
  if (brats) {
    const auto& names = BratsModalityNames();
    csv << names[0] << "," << names[1] << "," << names[2] << "," << names[3]
        << "\n";
  } else {
    csv << "image\n";
  }
  for (int64_t i = 0; i < n; ++i) {
    torch::Tensor a = balls(3), b = balls(3);
    torch::Tensor volume = torch::stack({a, b, a + b, a - b}) +
                           0.05 * torch::randn({4, size, size, size});
    char name[40];
    if (!brats) {
      std::snprintf(name, sizeof(name), "volumes/case_%04lld.nii",
                    static_cast<long long>(i));
      DDP_RETURN_IF_ERROR(WriteNifti(dir + "/" + name, volume));
      csv << name << "\n";
      continue;
    }
    std::snprintf(name, sizeof(name), "SynBraTS_%05lld",
                  static_cast<long long>(i));
    const std::string c = name;
    fs::create_directories(dir + "/" + c, ec);
    if (ec) return InternalError("cannot create " + dir + "/" + c);
    for (int64_t m = 0; m < kBratsModalities; ++m) {
      const std::string file =
          c + "/" + c + "_" + BratsModalityNames()[m] + ".nii.gz";
      DDP_RETURN_IF_ERROR(WriteNifti(dir + "/" + file, volume[m]));
      csv << (m ? "," : "") << file;
    }
    csv << "\n";
    DDP_RETURN_IF_ERROR(
        WriteNifti(dir + "/" + c + "/" + c + "_seg.nii.gz", a + 2 * b));
  }
  csv.close();
  if (!csv) return InternalError("cannot write " + dir + "/cases.csv");
  fs::rename(dir + "/cases.csv.tmp", dir + "/cases.csv", ec);
  if (ec)
    return InternalError("cannot write " + dir + "/cases.csv: " + ec.message());
  return Status::Ok();
}

}  // namespace ddprun::examples
